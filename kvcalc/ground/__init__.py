"""The ground floor: arithmetic over ints and arrays (num), dtypes and the size limits every
input is checked against (dtypes), counts read and figures written (units), records
(record), and input files read strictly (inputfile, yamlread).

Every other module may import these; they import nothing of kvcalc's but one another and
kvcalc.errors.
"""
