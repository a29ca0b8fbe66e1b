"""simulators/ stays free of the service's libraries (docs/conventions.md rule 1)."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("optuna", "mlflow", "hydra", "omegaconf", "torch")


def test_simulators_import_without_service_libraries() -> None:
    code = (
        "import json, sys\n"
        "import simulators, simulators.layout, simulators.specs\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    assert "simulators" in loaded
    assert not loaded & set(FORBIDDEN), f"simulators loaded {sorted(loaded & set(FORBIDDEN))}"
