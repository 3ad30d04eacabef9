"""Whole arrays to and from C99 hex-float text at once, bit for bit.

Why: the wire format (:mod:`resverify.spec.codec`) spells every element as ``float.hex``
text. Formatting and, above all, parsing those strings one Python call at a time cost
about 8 µs an element, which dominated every exchange with an external engine. Here the
same text is produced and read with NumPy bit manipulation on whole arrays: the IEEE
fields of float64 are taken apart with shifts and masks, and hex digits are looked up in
a table, so no per-element Python runs.

The output of :func:`format_hex` is exactly ``[float(v).hex() for v in values]`` (the
canonical spelling: ``-0x1.8000000000000p+1``, ``0x0.0000000000001p-1022`` for the
smallest subnormal, ``0x0.0p+0`` and ``-0x0.0p+0`` for zeros, ``inf``, ``-inf`` and
``nan`` for every NaN, whatever its sign or payload: the wire format carries no payload).

:func:`parse_hex` reads that canonical spelling, and only it: every other valid spelling
of the wire format (short or upper-case hex, decimals, ``Inf``, numbers that are not
strings) is reported as not parsed, for the scalar reader
:func:`resverify.spec.codec.decode_number` to handle. The exactness of both directions is
proved against the scalar implementation in ``tests/spec/test_hexfloat.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = []

_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_MANT_BITS, _EXP_MASK, _MANT_MASK = 52, 0x7FF, (1 << 52) - 1
_WIDTH = 25  # "-0x1." + 13 digits + "p" + sign + 4 digits
_NIBBLE = np.zeros(256, dtype=np.uint8)
_NIBBLE[_DIGITS] = np.arange(16)
# every exponent float.hex writes ("+1023" ... "-1074"), as 6 NUL-padded bytes
_EXPONENTS = np.arange(-1074, 1024)
_EXP_TEXT = np.array([f"{e:+d}".encode() for e in _EXPONENTS.tolist()], dtype="S6")
_EXP_KEYS = np.frombuffer(_EXP_TEXT.tobytes(), dtype=np.uint8).reshape(-1, 6)
_KEY_ORDER = np.argsort(np.pad(_EXP_KEYS, ((0, 0), (0, 2))).view(np.uint64).ravel())
_SORTED_KEYS = np.pad(_EXP_KEYS, ((0, 0), (0, 2))).view(np.uint64).ravel()[_KEY_ORDER]
_SPECIAL = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan, "0x0.0p+0": 0.0, "-0x0.0p+0": -0.0}


def _rows(values: np.ndarray) -> np.ndarray:
    """One NUL-padded row of ASCII per element: its ``float.hex`` text."""
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    bits = flat.view(np.uint64)
    biased = ((bits >> np.uint64(_MANT_BITS)) & np.uint64(_EXP_MASK)).astype(np.int64)
    mant = bits & np.uint64(_MANT_MASK)
    rows = np.zeros((flat.size, _WIDTH), dtype=np.uint8)
    rows[:, 0:5] = np.frombuffer(b"-0x1.", dtype=np.uint8)
    rows[biased == 0, 3] = ord("0")
    shifts = np.arange(48, -1, -4, dtype=np.uint64)
    rows[:, 5:18] = _DIGITS[((mant[:, None] >> shifts) & np.uint64(15)).astype(np.intp)]
    rows[:, 18] = ord("p")
    exponent = np.where(biased == 0, -1022, biased - 1023)
    rows[:, 19:25] = _EXP_KEYS[np.minimum(exponent + 1074, len(_EXP_KEYS) - 1)]  # inf, nan: below
    rows = _drop_sign(rows, bits >> np.uint64(63) == 0)
    for i in np.flatnonzero((biased == _EXP_MASK) | ((bits << np.uint64(1)) == 0)).tolist():
        word = float(flat[i]).hex().encode()  # inf, nan and zeros, spelled by Python itself
        rows[i] = 0
        rows[i, :len(word)] = np.frombuffer(word, dtype=np.uint8)
    return rows


def format_hex(values: np.ndarray) -> list[str]:
    """``[float(v).hex() for v in values.ravel()]``, computed on the whole array at once."""
    return list(map(bytes.decode, _rows(values).view(f"S{_WIDTH}").ravel().tolist()))


def format_hex_json(values: np.ndarray) -> str:
    """``json.dumps(format_hex(values))``, the JSON array text, built without a string per
    element: each row gets its quotes and separator, and the NUL padding is dropped."""
    rows = _rows(values)
    if not len(rows):
        return "[]"
    quoted = np.zeros((len(rows), _WIDTH + 4), dtype=np.uint8)
    quoted[:, 0] = ord('"')
    quoted[:, 1:_WIDTH + 1] = rows
    quoted[:, _WIDTH + 1:] = np.frombuffer(b'", ', dtype=np.uint8)
    body = quoted.tobytes().replace(b"\0", b"")
    return "[" + body[:-2].decode("ascii") + "]"


def _drop_sign(rows: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """Shift positive rows one column left, over the leading ``-``."""
    rows[positive, :-1] = rows[positive, 1:]
    rows[positive, -1] = 0
    return rows


def parse_hex(data: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """``(values, parsed)``: float64 values of the canonical ``float.hex`` strings in
    ``data``, and a mask of the elements read; elements not read hold 0 and are for the
    caller's scalar reader (any other spelling, or anything that is not a string)."""
    n = len(data)
    values, parsed = np.zeros(n, dtype=np.float64), np.zeros(n, dtype=bool)
    if n == 0:
        return values, parsed
    if set(map(type, data)) == {str}:
        strings = np.ones(n, dtype=bool)
        codes = np.array(data, dtype=f"U{_WIDTH + 1}")  # one column more: longer ones fail
    else:
        strings = np.fromiter((type(v) is str for v in data), bool, n)
        codes = np.array([v if type(v) is str else "" for v in data], dtype=f"U{_WIDTH + 1}")
    wide = codes.view(np.uint32).reshape(n, _WIDTH + 1)
    got, ok = _parse_codes(wide.astype(np.uint8))
    ok &= (wide < 128).all(axis=1)  # bytes of other characters were cut to 8 bits
    values[ok], parsed[:] = got[ok], ok
    for i in np.flatnonzero(strings & ~parsed).tolist():
        special = _SPECIAL.get(str(data[i]))
        if special is not None:
            values[i], parsed[i] = special, True
    return values, parsed


def _parse_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse rows of UTF-32 code points shaped like ``-?0x[01].<13 hex>p[+-]<1-4 digits>``."""
    negative = codes[:, 0] == ord("-")
    body = codes.copy()
    body[negative, :-1] = codes[negative, 1:]
    body[negative, -1] = 0
    lead = body[:, 2]
    ok = ((body[:, 0] == ord("0")) & (body[:, 1] == ord("x")) & ((lead == 48) | (lead == 49))
          & (body[:, 3] == ord(".")) & (body[:, 17] == ord("p")))
    mant, hex_ok = _hex_digits(body[:, 4:17])
    exponent, exp_ok = _exponent(body[:, 18:])
    ok &= hex_ok & exp_ok
    normal = lead == ord("1")
    ok &= np.where(normal, (exponent >= -1022) & (exponent <= 1023),
                   (exponent == -1022) & (mant != 0))
    biased = np.where(normal & ok, exponent + 1023, 0).astype(np.uint64)
    bits = (negative.astype(np.uint64) << np.uint64(63)) | (biased << np.uint64(52)) | mant
    return np.where(ok, bits, 0).view(np.float64), ok


def _hex_digits(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """13 lower-case hex digit columns as one integer per row, and where all were digits."""
    decimal = (cols >= ord("0")) & (cols <= ord("9"))
    letter = (cols >= ord("a")) & (cols <= ord("f"))
    nibble = _NIBBLE[cols].astype(np.uint64)
    shifts = np.arange(48, -1, -4, dtype=np.uint64)
    mant = np.bitwise_or.reduce(nibble << shifts, axis=1)
    return mant, np.asarray((decimal | letter).all(axis=1))


def _exponent(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[+-]`` and 1 to 4 digits as float.hex writes them (looked up among all 2,098),
    then nothing (NUL padding)."""
    key = np.ascontiguousarray(np.pad(cols[:, :6], ((0, 0), (0, 2)))).view(np.uint64).ravel()
    where = np.minimum(np.searchsorted(_SORTED_KEYS, key), len(_SORTED_KEYS) - 1)
    ok = (_SORTED_KEYS[where] == key) & (cols[:, 6:] == 0).all(axis=1)
    return _EXPONENTS[_KEY_ORDER[where]], ok
