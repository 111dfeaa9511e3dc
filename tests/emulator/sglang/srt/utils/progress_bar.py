"""The part of tqdm (4.70) that SGLang's startup bars use, so the emulator writes byte-identical
progress to its log without depending on tqdm.

What a log file sees (stderr redirected to a regular file, as under a supervisor):
- `ncols` is unknown (no terminal), so a `{bar}` is 10 characters wide; the encoding is UTF-8,
  so the bar uses the Unicode blocks.
- every display is `\\r` + the bar text (padded with spaces to the previous length), flushed at
  once, with no newline: the whole bar is ONE physical line holding many `\\r`-separated updates,
  and `close()` ends it with a single `\\n`. Log lines other processes write meanwhile land in
  the middle of it.
- iterations update the display at most every `mininterval` (0.1 s) and then only every
  `miniters` iterations (adapted by an EMA, as tqdm's dynamic miniters); `set_description`
  always redraws.
"""

import sys
import time
from typing import Any, Iterable, Iterator, Optional, TextIO

UTF = " " + "".join(map(chr, range(0x258F, 0x2587, -1)))
ASCII = " 123456789#"


class EMA:
    """tqdm.std.EMA: exponential moving average with bias correction."""

    def __init__(self, smoothing: float = 0.3) -> None:
        self.alpha = smoothing
        self.last = 0.0
        self.calls = 0

    def __call__(self, x: Optional[float] = None) -> float:
        beta = 1 - self.alpha
        if x is not None:
            self.last = self.alpha * x + beta * self.last
            self.calls += 1
        return self.last / (1 - beta ** self.calls) if self.calls else self.last


def format_interval(t: float) -> str:
    sign = "-" if t < 0 else ""
    mins, s = divmod(abs(int(t)), 60)
    h, m = divmod(mins, 60)
    return f"{sign}{h:d}:{m:02d}:{s:02d}" if h else f"{sign}{m:02d}:{s:02d}"


def _bar(frac: float, width: int, charset: str) -> str:
    nsyms = len(charset) - 1
    bar_length, frac_bar_length = divmod(int(frac * width * nsyms), nsyms)
    res = charset[-1] * bar_length
    if bar_length < width:
        res = res + charset[frac_bar_length] + charset[0] * (width - bar_length - 1)
    return res


def format_meter(n: int, total: Optional[int], elapsed: float, prefix: str = "",
                 unicode: bool = True, rate: Optional[float] = None,
                 bar_format: Optional[str] = None) -> str:
    """tqdm.format_meter for unit='it', no unit_scale, no postfix, ncols=None."""
    if total and n >= total + 0.5:
        total = None
    elapsed_str = format_interval(elapsed)
    if rate is None and elapsed:
        rate = n / elapsed
    inv_rate = 1 / rate if rate else None
    rate_noinv_fmt = (f"{rate:5.2f}" if rate else "?") + "it/s"
    rate_inv_fmt = (f"{inv_rate:5.2f}" if inv_rate else "?") + "s/it"
    rate_fmt = rate_inv_fmt if inv_rate and inv_rate > 1 else rate_noinv_fmt
    n_fmt, total_fmt = str(n), (str(total) if total is not None else "?")
    remaining = (total - n) / rate if rate and total else 0
    remaining_str = format_interval(remaining) if rate else "?"
    l_bar = (prefix if prefix[-2:] == ": " else prefix + ": ") if prefix else ""
    r_bar = f"| {n_fmt}/{total_fmt} [{elapsed_str}<{remaining_str}, {rate_fmt}]"
    fields = {"n": n, "n_fmt": n_fmt, "total": total, "total_fmt": total_fmt,
              "elapsed": elapsed_str, "desc": prefix or "", "rate_fmt": rate_fmt,
              "remaining": remaining_str, "r_bar": r_bar, "postfix": ""}
    if not total:
        return f"{l_bar}{n_fmt}it [{elapsed_str}, {rate_fmt}]"
    frac = n / total
    percentage = frac * 100
    l_bar += f"{percentage:3.0f}%|"
    fields.update(l_bar=l_bar, percentage=percentage)
    fmt = bar_format or "{l_bar}{bar}{r_bar}"
    if bar_format and not prefix:
        fmt = fmt.replace("{desc}: ", "")
    return fmt.format(bar=_bar(frac, 10, UTF if unicode else ASCII), **fields)


def _supports_unicode(fp: Any) -> bool:
    try:
        "\u2588\u2589".encode(fp.encoding)
        return True
    except UnicodeEncodeError:
        return False
    except Exception:
        enc = getattr(fp, "encoding", None)
        return isinstance(enc, str) and (enc.lower().startswith("utf-") or enc == "U8")


class tqdm:  # noqa: N801 - same name as the real class, so call sites read like SGLang's
    """Iterate with `for x in tqdm(items, desc=...)` or count with `update()` / `close()`."""

    def __init__(self, iterable: Optional[Iterable[Any]] = None, desc: Optional[str] = None,
                 total: Optional[int] = None, disable: bool = False,
                 bar_format: Optional[str] = None, position: Optional[int] = None,
                 file: Optional[TextIO] = None, mininterval: float = 0.1,
                 smoothing: float = 0.3, clock: Any = None) -> None:
        del position  # one bar per process: always the first row
        self.iterable = iterable
        if total is None and iterable is not None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except (TypeError, AttributeError):
                total = None
        self.total = total
        self.disable = disable
        self.n = 0
        if disable:
            return
        self.fp = file if file is not None else sys.stderr
        self.desc = desc or ""  # format_meter adds the ": "
        self.bar_format = bar_format
        self.unicode = _supports_unicode(self.fp)
        self.mininterval = mininterval
        self.miniters: float = 0
        self.smoothing = smoothing
        self._ema_dn, self._ema_dt, self._ema_miniters = EMA(smoothing), EMA(smoothing), EMA(smoothing)
        self._time = clock or time.time
        self._last_len = 0
        self.last_print_n = 0
        self.last_print_t = self.start_t = self._time()
        self.refresh()

    def __len__(self) -> int:
        return self.total or 0

    def __enter__(self) -> "tqdm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _rate(self) -> Optional[float]:
        dt = self._ema_dt()
        return self._ema_dn() / dt if dt else None

    def __str__(self) -> str:
        return format_meter(self.n, self.total, self._time() - self.start_t, prefix=self.desc,
                            unicode=self.unicode, rate=self._rate(), bar_format=self.bar_format)

    def _print_status(self, s: str) -> None:
        self.fp.write("\r" + s + " " * max(self._last_len - len(s), 0))
        self.fp.flush()
        self._last_len = len(s)

    def refresh(self) -> None:
        if not self.disable:
            self._print_status(str(self))

    def set_description(self, desc: Optional[str] = None) -> None:
        self.desc = desc + ": " if desc else ""
        self.refresh()

    def update(self, n: int = 1) -> None:
        if self.disable:
            return
        self.n += n
        if self.n - self.last_print_n < self.miniters:
            return
        cur_t = self._time()
        dt = cur_t - self.last_print_t
        if dt < self.mininterval:
            return
        dn = self.n - self.last_print_n
        if self.smoothing and dt and dn:
            self._ema_dn(dn)
            self._ema_dt(dt)
        self.refresh()
        # dynamic miniters (tqdm's maxinterval is 10 s)
        if dt >= 10:
            self.miniters = dn * self.mininterval / dt
        else:
            self.miniters = self._ema_miniters(dn * (self.mininterval / dt if dt else 1))
        self.last_print_n = self.n
        self.last_print_t = cur_t

    def __iter__(self) -> Iterator[Any]:
        """As tqdm inlines it: the count lives in a local until a display is due, so a
        `set_description` in the loop body redraws the count of the last display."""
        if self.disable:
            yield from self.iterable or ()
            return
        n, last_print_n, last_print_t = self.n, self.last_print_n, self.last_print_t
        try:
            for obj in self.iterable or ():
                yield obj
                n += 1
                if n - last_print_n >= self.miniters:
                    if self._time() - last_print_t >= self.mininterval:
                        self.update(n - last_print_n)
                        last_print_n, last_print_t = self.last_print_n, self.last_print_t
        finally:
            self.n = n
            self.close()

    def close(self) -> None:
        """Final display with the overall average rate, then the one newline of the bar."""
        if self.disable:
            return
        self.disable = True
        self._ema_dt = lambda *_: 0.0
        self._print_status(str(self))
        self.fp.write("\n")
        self.fp.flush()
