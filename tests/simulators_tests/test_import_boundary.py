"""autotune/simulators/ stays free of the service's libraries (docs/conventions.md rule 1)."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("optuna", "mlflow", "hydra", "omegaconf", "torch")


def test_simulators_import_without_service_libraries() -> None:
    code = (
        "import json, sys\n"
        "import autotune.simulators, autotune.simulators.layout, autotune.simulators.specs\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    modules = json.loads(out)
    loaded = {m.split(".")[0] for m in modules}
    assert "autotune.simulators" in modules
    service = sorted(
        {".".join(m.split(".")[:2]) for m in modules if m.startswith("autotune.")}
        - {"autotune.simulators"}
    )
    assert not service, f"autotune.simulators loaded the service's packages {service}"
    assert not loaded & set(FORBIDDEN), f"simulators loaded {sorted(loaded & set(FORBIDDEN))}"
