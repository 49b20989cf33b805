"""`WindowMap`'s index answers what a scan of every window would, whatever changes it."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.panes import OnTime
from dataflow_core.model.trigger_machine import TriggerState
from dataflow_core.model.window_map import WindowMap
from dataflow_core.model.window_state import WindowState
from dataflow_core.model.windows import IntervalWindow

_windows = st.builds(lambda s, n: IntervalWindow(s, s + n), st.integers(0, 6), st.integers(1, 4))
_timer = st.one_of(st.none(), st.integers(0, 12))
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _windows, _timer, _timer),
        st.tuples(st.just("del"), _windows),
        st.tuples(st.just("pop"), _windows),
        st.tuples(st.just("retime"), _windows, _timer, _timer),
        st.tuples(st.just("due"), st.integers(0, 12)),
        st.tuples(st.just("copy"),),
    ),
    max_size=40,
)


def _state(w: IntervalWindow, pt, et) -> WindowState:
    return WindowState(window=w, trigger=TriggerState(), acc=0, on_time=OnTime.BEFORE,
                       processing_timer=pt, event_timer=et)


def _least(values):
    present = [v for v in values if v is not None]
    return min(present) if present else None


@settings(max_examples=300, deadline=None)
@given(_ops, st.integers(-1, 12))
def test_the_index_agrees_with_a_scan_of_every_window(ops, watermark):
    m = WindowMap()
    for op in ops:
        if op[0] == "put":
            m[op[1]] = _state(op[1], op[2], op[3])
        elif op[0] == "del" and op[1] in m:
            del m[op[1]]
        elif op[0] == "pop":
            assert m.pop(op[1], None) is not None or op[1] not in m
        elif op[0] == "retime" and op[1] in m:  # what KeyedWindowSet._refresh_timers does
            ws = m[op[1]]
            ws.processing_timer, ws.event_timer = op[2], op[3]
            m.note_timers(ws)
        elif op[0] == "due":
            expected = {w for w, ws in m.items() if ws.processing_timer is not None and ws.processing_timer <= op[1]}
            assert set(m.due_processing_timers(op[1])) == expected
            for w in expected:  # delivered: each window's timer moves on, and is indexed anew
                m[w].processing_timer = None
                m.note_timers(m[w])
        elif op[0] == "copy":
            m = copy.deepcopy(m) if len(m) % 2 else m.copy()
        assert m.ends == sorted(w.end for w in m)
        assert m.next_processing_timer() == _least(ws.processing_timer for ws in m.values())
        assert m.next_event_timer() == _least(ws.event_timer for ws in m.values())
        assert m.least_end() == _least(w.end for w in m)
        assert m.next_end_after(watermark) == _least(w.end for w in m if w.end > watermark)
