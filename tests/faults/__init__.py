"""A Jepsen-style fault campaign: claims on a 3-node Galera cluster under faults."""
