"""--engine, --mfu and --bandwidth-efficiency as the commands read them: the library's
reading (kvcalc.answers.speed), whose errors name the parameters (engine, mfu) and reach
the user as the flags (kvcalc.cli)."""

from kvcalc.answers.speed import DEFAULT, engine_option, memory_engine, resolve, shares

__all__ = ["DEFAULT", "engine_option", "memory_engine", "resolve", "shares"]
