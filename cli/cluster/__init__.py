"""The fleet as placement sees it: nodes, their status, and what holds their GPUs."""

from datetime import timedelta

# A blip is not a loss: a node turns Lost, and its replicas move, only after this long
# unreached, because rebuilding a multi-node replica costs tens of minutes of loading.
# Unreachable comes at the first failed gather; the two are deliberately far apart.
DEFAULT_LOST_AFTER = timedelta(hours=1)
