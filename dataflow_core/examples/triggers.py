"""A custom, data-driven trigger: fire when an element matches a predicate.

For instance, emit a user's session pane as soon as a purchase event arrives rather than
waiting for the watermark. Wrap it in `Repeatedly` to fire on every match.
"""

from __future__ import annotations

from typing import Any, Callable

from dataflow_core.model.trigger_machine import Trigger, TriggerContext, TriggerState


class AfterMatchingElement(Trigger):
    def __init__(self, predicate: Callable[[Any], bool], name: str = "predicate"):
        self.predicate = predicate
        self.name = name

    def on_element(self, state: TriggerState, ctx: TriggerContext, value: Any, timestamp: int) -> None:
        if self.predicate(value):
            state.data["matched"] = True

    def on_merge(self, parts, ctx):
        merged = super().on_merge(parts, ctx)
        if any(p.data.get("matched") for p in parts):
            merged.data["matched"] = True
        return merged

    def should_fire(self, state: TriggerState, ctx: TriggerContext) -> bool:
        return bool(state.data.get("matched"))

    def on_fire(self, state: TriggerState, ctx: TriggerContext) -> None:
        state.finished = True

    def describe(self) -> str:
        return f"AfterMatchingElement({self.name})"
