"""How the capacity guard (migration 0002) says no: its error codes and its words.

The migration's triggers raise these and ``allotment.db.errors`` recognizes
them: one definition for both, so the two cannot drift apart
(tests/test_capacity_guard.py makes a trigger refuse a row on each database).
The migration imports this module: it must stay free of anything but constants.
"""

from __future__ import annotations

import re

# PostgreSQL: the SQLSTATE the trigger raises (class "AL" is ours, unused by
# PostgreSQL, so no server error can carry it).
SQLSTATE = "AL409"
# MySQL/MariaDB: SIGNAL SQLSTATE '45000' (user-defined) with this error number.
MYSQL_ERRNO = 3409
# The start of the refusal's message, followed by ": provider <id> class <id> ...".
MESSAGE = "allotment capacity guard"

# The refused row's provider id and resource class id in the message.
REFUSED_ROW = re.compile(re.escape(MESSAGE) + r": provider (\d+) class (\d+)")
