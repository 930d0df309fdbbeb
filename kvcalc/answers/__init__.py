"""The commands as library functions: each takes what its command takes, by keyword, in
the library's units (bytes, tokens, milliseconds: named in the parameter), and returns a
record whose `as_dict()` is the command's `--format json`, exactly. The CLI only parses
its flags into these parameters, calls, and prints (its tables read the same record).

- `kvcalc.fit(...)` (fit.py): `kvcalc fit`, vLLM's start-up count and the floor beside it.
- `kvcalc.check(...)` (check.py): `kvcalc check LOG`, a start-up log beside kvcalc's count.
- `kvcalc.sweep(...)`: `kvcalc sweep`, in kvcalc/sweep/answer.py (the sweep's layer sits
  above this one).
- `kvcalc.plan(...)` (plan.py): `kvcalc plan`, the layouts N GPUs allow and the launch line.
- `kvcalc.bench(...)` (bench.py): `kvcalc bench`, a served-load benchmark predicted.
- `kvcalc.estimate(...)` (estimate.py): `kvcalc estimate` at the command's defaults (an
  H100 SXM, timed as vLLM runs it), with the engine's memory count, vLLM's layout and
  --compare; kvcalc.figures(MODEL, ...) is its lower-level form, positional, at Python's
  defaults (no device unless named, the roofline unless an engine is named).
- `kvcalc.measure(...)`: `kvcalc measure`'s attention and layer steps; it lives in
  kvcalc/measure/answer.py, beside the torch code it runs (a layer above this one).

A value a function cannot take raises kvcalc.errors.ParameterError, naming the
parameter (`max_model_len`); the command line says it as the flag (`--max-model-len`).
"""
