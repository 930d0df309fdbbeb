from kvcalc.cli import app

app(prog_name="kvcalc")
