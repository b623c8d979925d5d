"""The fleet as placement sees it: nodes, their status, and what holds their GPUs."""

import re
from datetime import timedelta
from functools import cache

# A blip is not a loss: a node turns Lost, and its replicas move, only after this long
# unreached, because rebuilding a multi-node replica costs tens of minutes of loading.
# Unreachable comes at the first failed gather; the two are deliberately far apart.
DEFAULT_LOST_AFTER = timedelta(hours=1)


NameKey = tuple[tuple[str, int], ...]
_DIGITS = re.compile(r"(\d+)")


@cache  # placement breaks ties with it on every candidate node, for every replica
def name_order(name: str) -> NameKey:
    """The order people number things in: node-2 before node-10, gpu-b1 before gpu-b12.

    Each run of digits is compared as a number, the text before it as text; names equal
    that way (node-02 and node-2) fall back to plain text order.
    """
    pieces = _DIGITS.split(name)  # text, digits, text, digits, ..., text
    pairs = [(pieces[i], int(pieces[i + 1])) for i in range(0, len(pieces) - 1, 2)]
    return (*pairs, (pieces[-1], -1), (name, -1))
