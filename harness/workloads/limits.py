"""The largest sizes a scenario may ask for, in one place: a number above any of them is a typo or a
unit mix-up (seconds for milliseconds, bytes for pixels), and it is refused when the plan is made,
before any engine starts, with the limit named.

Each limit is far above what a real GPU study asks for (the B200 study's largest workload is 1,000
prompts of 4,096 tokens; the largest published multimodal settings are a few dozen images or 64
frames per prompt at a few thousand pixels a side), and far below what would take a node down (a
prompt list that does not fit in memory, a server asked to hold a million open connections).
README.md lists them too. Standard library only: the worker imports the workload modules.
"""

from __future__ import annotations

# Tokens of one prompt's text part (input_len) and of one request's output (output_len).
MAX_TOKENS = 1_048_576
# Prompts one pass builds at once: num_prompts, a latency batch, a serve point's requests, warm-up requests.
MAX_PROMPTS = 65_536
# Token ids one pass builds (prompts x (input_len + output_len)): the worker holds them all in memory.
MAX_PASS_TOKENS = 1 << 31
# Requests in flight at once (serve concurrency). As many as one point's requests: a Poisson search or
# point that must not queue in the client declares a bound far above what the server holds (2,048 in
# cpu-capacity), and the shipped scenarios stay far below the limit.
MAX_CONCURRENCY = 65_536
# Load points of one serve workload (concurrency values x request rates).
MAX_LOAD_POINTS = 256
# Requests per second of a paced serve point.
MAX_REQUEST_RATE = 1_000_000.0
# Timed batches, warm-up iterations, timed passes.
MAX_ITERATIONS = 10_000
# Image and video frame width or height, in pixels.
MAX_SIDE_PX = 16_384
# Frames of one synthetic video, or the most read from a video of a folder.
MAX_FRAMES = 4_096
# Raw pixels of one synthetic image or video (frames x height x width x 3 bytes).
MAX_ITEM_BYTES = 4 << 30
# Images, videos or audio clips in one prompt.
MAX_ITEMS_PER_PROMPT = 256
# Seconds of one audio clip (synthetic duration, or the clamp of a folder's clips).
MAX_AUDIO_S = 3_600.0
# Audio samples per second.
MAX_SAMPLE_RATE = 384_000
# Repeats of a scenario.
MAX_REPEATS = 1_000
# A run's timeout: an engine takes seconds to minutes to start; under a second is a unit mix-up.
MIN_TIMEOUT_S = 1.0
# A run's (or a server's, or a request's) timeout at most: a week.
MAX_TIMEOUT_S = 7 * 24 * 3600.0

WHERE = "harness/workloads/limits.py"


def _fmt(v: float) -> str:
    f = float(v)
    return f"{int(f):,}" if f.is_integer() else f"{f:,g}"


def at_most(name: str, value: float, limit: float, unit: str) -> None:
    """ValueError naming the key, the value and the limit when `value` is above `limit` (or NaN)."""
    if not value <= limit:
        raise ValueError(f"{name}: {_fmt(value)} is above the harness's limit of {_fmt(limit)} {unit} "
                         f"(no real study needs more; {WHERE})")


def at_least(name: str, value: float, limit: float, unit: str) -> None:
    if not value >= limit:
        raise ValueError(f"{name}: {_fmt(value)} is below the harness's floor of {_fmt(limit)} {unit} "
                         f"({WHERE})")


def timeout(name: str, value: float) -> None:
    """A timeout in seconds: between MIN_TIMEOUT_S and MAX_TIMEOUT_S."""
    at_least(name, value, MIN_TIMEOUT_S, "s")
    at_most(name, value, MAX_TIMEOUT_S, "s (a week)")


def side(name: str, value: int) -> None:
    at_most(name, value, MAX_SIDE_PX, "px")


def item_bytes(name: str, frames: int, width: int, height: int) -> None:
    """One synthetic image or video, as raw RGB bytes."""
    size = frames * width * height * 3
    if size > MAX_ITEM_BYTES:
        raise ValueError(f"{name}: {frames:,} x {width:,} x {height:,} px is {size / (1 << 30):,.1f} GiB of raw "
                         f"pixels per input, above the harness's limit of {MAX_ITEM_BYTES >> 30} GiB ({WHERE})")
