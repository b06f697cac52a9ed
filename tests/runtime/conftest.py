import os
import sys

# The spawned ranks import the test modules and helpers by name: make sure both this folder and
# the repository root are importable whatever pytest's import mode.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
for p in (_HERE, _ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)
