"""Index terms of code and prose: identifiers whole and split into their parts, stop words dropped.

Shared by the repository index (``fixgraph.localize``) and the history index (``fixgraph.localize.history``),
so both rank with the same words.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOP = frozenset("""
a an and are as at be been but by can could did do does doing for from had has have how i if in into is
it its it's me my no not of on or our out so some such than that the their them then there these they
this to too was we were what when where which while who why will with would you your yes also just get
got use used using like one two only any all more most other same should may might must here
self cls none true false def class return import from pass raise else elif try except finally
lambda yield assert del global nonlocal await async print len str int float dict list tuple set
bool object type args kwargs true false none e g eg ie x y z n i j k s t v
python version versions issue bug error problem expected actual result results output input
example code following file files line lines work works working way thing want need case
""".split())


def split_identifier(name: str) -> list[str]:
    """``to_stacked_array`` -> to, stacked, array; ``DataArray`` -> data, array."""
    parts: list[str] = []
    for chunk in name.split("_"):
        parts.extend(p.lower() for p in _CAMEL.findall(chunk))
    return [p for p in parts if len(p) > 1]


def terms_of(text: str) -> list[str]:
    """Index terms: each identifier whole (lower case) plus its parts, stop words dropped."""
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        if len(low) > 1 and low not in STOP:
            out.append(low)
        parts = split_identifier(word)
        if len(parts) > 1:
            out.extend(p for p in parts if p not in STOP)
    return out
