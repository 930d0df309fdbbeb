"""`safe_load` as PyYAML's, parsed by libyaml when PyYAML was built with it.

The same documents: CSafeLoader is SafeLoader's constructors and resolvers over libyaml's
parser (read back equal, key order included, for every YAML file under tests/data and
presets/). PyYAML's own parser is pure Python: the suite's ~600 loads of its data files
(many of them while collecting, in every pytest-xdist worker) took 3.1 s of parsing for
the 255 files against 0.4 s with libyaml.
"""

from __future__ import annotations

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream):
    return yaml.load(stream, Loader=_LOADER)
