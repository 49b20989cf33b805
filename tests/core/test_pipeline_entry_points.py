"""An installed package of the user's names its pipeline modules in the entry-point group
`dataflow.pipelines` (dataflow_core/pipelines/registry.py): `dataflow pipelines` lists them
beside the shipped examples, and a module that cannot be imported is one line naming the
entry point. The distribution is real metadata on the path (a `.dist-info` folder, what pip
writes), found by importlib.metadata as any installed one is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODULE = '''
from dataflow_core.api import AfterWatermark, FixedWindows, SumFn, pipeline, stage

pipeline("shop_revenue", input_table="shop_orders", key="shop_id", value="amount",
         stages=[stage("shop_revenue", FixedWindows("1h"), SumFn(), trigger=AfterWatermark(),
                       accumulation="discarding")])
'''


def _installed(site: Path, module: str) -> None:
    """A distribution `shop` whose entry point names `module`."""
    info = site / "shop-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shop\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[dataflow.pipelines]\nrevenue = {module}\n")


def _pipelines(site: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "DATAFLOW_PIPELINES"}
    env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
    return subprocess.run([sys.executable, "-m", "dataflow_core", "pipelines"], capture_output=True, text=True,
                          env=env, cwd=site, timeout=60)


def test_an_installed_package_registers_its_pipelines_through_the_entry_point_group(tmp_path: Path):
    (tmp_path / "shop_pipelines.py").write_text(MODULE)
    _installed(tmp_path, "shop_pipelines")
    done = _pipelines(tmp_path)
    assert done.returncode == 0, done.stderr
    names = [line.split(":")[0] for line in done.stdout.splitlines() if line and not line.startswith(" ")]
    assert names == ["ad_sessions", "billing", "shop_revenue"], done.stdout


def test_an_entry_point_naming_a_missing_module_is_one_line_naming_it(tmp_path: Path):
    _installed(tmp_path, "no_such_pipelines")
    done = _pipelines(tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'revenue'" in lines[0] and "dataflow.pipelines" in lines[0], done.stderr
    assert "no_such_pipelines" in lines[0] and "Traceback" not in done.stderr
