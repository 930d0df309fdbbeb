"""Units read and written: counts on the command line read as vLLM reads them, and figures
written as people read them (bytes in decimal and binary units, counts with SI prefixes,
seconds, rates). The ground floor: any module may parse a count or format a figure
without loading the report's tables or rich.

Reading. Counts written the way vLLM and llama.cpp users write them: 32k, 128K, 1.5m.

The suffix rule is vLLM's own, so that `--max-model-len 128k` means here what it
means to `vllm serve` (`human_readable_int`, vllm/engine/arg_utils.py, later
vllm/utils/argparse_utils.py; vLLM applies it to --max-model-len,
--max-num-batched-tokens and --kv-cache-memory-bytes):

- a lowercase k, m, g or t multiplies by 10^3, 10^6, 10^9 or 10^12, and the number
  may have decimals: 32k = 32,000, 25.6k = 25,600;
- an uppercase K, M, G or T multiplies by 2^10, 2^20, 2^30 or 2^40, whole numbers
  only: 32K = 32,768, 1M = 1,048,576; 1.5K is refused, as vLLM refuses it;
- no space between the number and the letter; a plain number is a plain number.

vLLM computes a decimal as int(float(number) * multiplier), which floating point
sometimes puts one below the exact value (32.3k -> 32,299). kvcalc reads the
decimal exactly and refuses a value whose exact reading is not whole (1.0005k) or
where vLLM's float reading differs from it, rather than count for a length vLLM
would not use.

Writing. Pure text: bytes are shown beside both units, GB (10^9) and GiB (2^30), each
labelled.
"""

from __future__ import annotations

import math
import re
import sys

from kvcalc.errors import KvcalcError, quoted

DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# The whole-number flags that take a suffix, and what they count.
COUNTS = {"--seq-len": "tokens", "--encoder-seq-len": "tokens", "--prompt-len": "tokens",
          "--max-model-len": "tokens", "--max-num-batched-tokens": "tokens",
          "--batch": "sequences"}

# For --help: the rule in one line.
SUFFIX_HELP = "k/m = 10^3/10^6, K/M = 2^10/2^20 as vLLM reads them: 32k = 32,000, 32K = 32,768"

_PLAIN = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
SUFFIXED = re.compile(r"([0-9]+)(?:\.([0-9]+))?([kmgtKMGT])")
_MAX_DIGITS = 30  # far beyond every limit kvcalc checks afterwards


def count(text: str, flag: str, unit: str | None = None) -> int:
    """'32k' -> 32000, '32K' -> 32768, '25.6k' -> 25600, '4096' -> 4096.

    A KvcalcError names `flag` and the unit (COUNTS[flag] unless given). The sign and
    size are left to the caller's checks (0 and negatives pass through as integers).
    """
    unit = unit or COUNTS.get(flag, "")
    s = text.strip()
    plain = _PLAIN.fullmatch(s)
    m = None if plain else SUFFIXED.fullmatch(s)
    if not plain and m is None:
        what = f"a whole number of {unit}" if unit else "a whole number"
        example = ("32768, 32k (= 32,000) or 32K (= 32,768)" if unit == "tokens"
                   else "8, 1k (= 1,000) or 1K (= 1,024)")
        raise KvcalcError(f"{flag} expects {what}, e.g. {example}; got {quoted(text)}")
    digits = s.replace("_", "").lstrip("+-") if plain else m.group(1) + (m.group(2) or "")
    if len(digits) > _MAX_DIGITS:  # before int(): 5,000 digits raise there
        raise KvcalcError(f"{flag}: {quoted(s)} is absurdly large")
    if plain:
        return int(s)
    return scaled(m, flag, unit or "units")


def scaled(m: re.Match, flag: str, unit: str, like_vllm: bool = True) -> int:
    """The integer a SUFFIXED match means, by vLLM's rule (module docstring).

    like_vllm=False skips the check against vLLM's float reading, for a quantity
    kvcalc alone takes (--reserve)."""
    whole, frac, suffix = m.group(1), m.group(2), m.group(3)
    shown = quoted(m.group(0))
    if suffix in BINARY:
        if frac is not None:
            binary = f" or {whole}.{frac}{suffix}iB" if unit == "bytes" else ""
            raise KvcalcError(f"{flag} {shown}: an uppercase {suffix} (x {BINARY[suffix]:,}) "
                              f"takes a whole number, as in vLLM; write {whole}.{frac}"
                              f"{suffix.lower()} for x {DECIMAL[suffix.lower()]:,}{binary}")
        return int(whole) * BINARY[suffix]
    mult = DECIMAL[suffix]
    if frac is None:
        return int(whole) * mult
    from fractions import Fraction  # only for a decimal

    exact = Fraction(int(whole + frac), 10 ** len(frac)) * mult
    if exact.denominator != 1:
        raise KvcalcError(f"{flag} {shown} is {float(exact):,.1f} {unit}: not a whole number "
                          f"of {unit}")
    value = int(exact)
    if not like_vllm:
        return value
    vllm = int(float(f"{whole}.{frac}") * mult)  # what vLLM's human_readable_int returns
    if vllm != value:
        raise KvcalcError(f"{flag} {shown}: vLLM's floating-point arithmetic reads this as "
                          f"{vllm:,}, not {value:,}; write the number ({value})")
    return value


# ------------------------------------------------------------------------------------
# Writing: figures as people read them
# ------------------------------------------------------------------------------------
DECIMAL_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))

BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _scaled(n: int, units: tuple[tuple[str, int], ...], suffix: str = "B") -> str:
    for name, size in units:
        if abs(n) >= size:
            x = n / size
            return f"{x:.3g} {name}" if abs(x) < 1000 else f"{x:,.0f} {name}"
    return f"{n} {suffix}"


def human_bytes(n: int) -> str:
    """'9.66 GB / 9 GiB': decimal and binary, both named."""
    if abs(n) < 1000:
        return f"{n} B"
    return f"{_scaled(n, DECIMAL_UNITS)} / {_scaled(n, BINARY_UNITS)}"


def exact_bytes(n: int) -> str:
    """'9,663,676,416 B (9.66 GB / 9 GiB)'."""
    return f"{n:,} B" if abs(n) < 1000 else f"{n:,} B ({human_bytes(n)})"


def human_count(n: float, unit: str = "") -> str:
    """1.75e11 -> '175 G' (SI prefixes, for parameters and FLOPs)."""
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.4g} {name}{unit}"
    return f"{n:.4g} {unit}".rstrip()


def human_seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for name, size in (("s", 1.0), ("ms", 1e-3), (_MICRO + "s", 1e-6)):
        if abs(s) >= size:
            return f"{s / size:.4g} {name}"
    return f"{s * 1e9:.4g} ns"


def _micro() -> str:
    """'µ', or 'u' where stdout cannot show it (PYTHONIOENCODING=ascii)."""
    try:
        "µ".encode(getattr(sys.stdout, "encoding", None) or "utf-8")
        return "µ"
    except (UnicodeEncodeError, LookupError):
        return "u"


_MICRO = _micro()


def human_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def count_words(n: int) -> str:
    """8030261248 -> '8.03B' (parameters, as model cards write them)."""
    for name, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{name}"
    return str(n)
