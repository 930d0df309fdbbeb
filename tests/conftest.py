import sys
from pathlib import Path

# tests/torch_reference.py is imported as a plain module by the tests beside it.
sys.path.insert(0, str(Path(__file__).parent))
