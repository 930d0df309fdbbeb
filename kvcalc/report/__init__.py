"""Rows to text for people and for programs, with every figure written by
kvcalc.ground.units (bytes in GB and GiB, both named; counts, seconds, rates).

    csv_json.py  rows as CSV (floats to twelve digits) and JSON
    files.py     report files written atomically, never over a file without --force
    consoles.py  the rich consoles (stdout for data, stderr for diagnostics)
    tables.py    the analytical commands' tables (Tab) and headline
    render.py    a Tab drawn as rich, markdown or plain text

Nothing is imported here: rich is imported only when a table or a console is drawn.
"""
