"""Runs a test script's unittest.main under the venv scripts/setup.sh builds (grpcio, h2).

    if __name__ == "__main__":
        venv_main.run(TOOLS, needs=("bin/grpcurl",))   # re-execs under TOOLS/venv if needed

Exits with a line naming TOOLS when the venv or one of `needs` (paths under TOOLS) is missing.
"""
import os
import sys
import unittest

_REEXEC = "RINGKV_TEST_VENV_REEXEC"


def run(tools, needs=()):
    venv = os.path.join(tools, "venv")
    python = os.path.join(venv, "bin", "python3")
    if os.path.realpath(sys.prefix) != os.path.realpath(venv) and not os.environ.get(_REEXEC):
        if not all(os.path.exists(p) for p in [python, *(os.path.join(tools, n) for n in needs)]):
            sys.exit(f"test tools missing under {tools}: run scripts/setup.sh")
        os.environ[_REEXEC] = "1"
        os.execv(python, [python, *sys.argv])
    unittest.main(argv=sys.argv[:1], verbosity=2)
