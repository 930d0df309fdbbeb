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

A value a function cannot take raises kvcalc.errors.ParameterError, naming the
parameter (`max_model_len`); the command line says it as the flag (`--max-model-len`).
"""
