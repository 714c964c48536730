#!/usr/bin/python3
"""snaptrims.py OUT: count the snapshots a cluster's OSDs trim while it runs.

Used by scripts/soak.sh. Every 10 s it reads the OSD maps published since it started (one
`osd dump` per epoch through librados) and adds up their new_removed_snaps (snapshots clients
deleted) and new_purged_snaps (snapshots whose objects the OSDs finished trimming: the mon
publishes them only after every PG of the pool trimmed them). It rewrites OUT after each pass
with the totals and the epochs it could not read (the mon keeps about 500 old maps, so a pass
that falls far behind loses some: they are counted, not guessed). SIGTERM ends it after a last
pass. Talks to the cluster of $CEPH_CONF/$CEPH_KEYRING (scripts/ceph-local.sh env) as admin.

Debian's python3-rados (the host's /usr/bin/python3), not the Go tests' libraries: this is a
tool of the soak, and every call is bounded (10 s).
"""
import json
import os
import signal
import sys
import time

import rados

stop = False


def on_term(*_):
    global stop
    stop = True


def mon(c, cmd):
    r, out, err = c.mon_command(json.dumps(dict(cmd, format="json")), b"", timeout=10)
    if r != 0:
        raise OSError(-r, err)
    return json.loads(out)


def main():
    out = sys.argv[1]
    signal.signal(signal.SIGTERM, on_term)
    c = rados.Rados(conffile=os.environ["CEPH_CONF"],
                    conf={"keyring": os.environ["CEPH_KEYRING"]}, rados_id="admin")
    c.connect(timeout=10)
    first = last = mon(c, {"prefix": "osd dump"})["epoch"]
    removed = purged = missed = 0
    while True:
        done = stop
        try:
            now = mon(c, {"prefix": "osd dump"})["epoch"]
            for e in range(last + 1, now + 1):
                try:
                    d = mon(c, {"prefix": "osd dump", "epoch": e})
                except OSError:
                    missed += 1
                    continue
                removed += sum(s["length"] for p in d["new_removed_snaps"] for s in p["snaps"])
                purged += sum(s["length"] for p in d["new_purged_snaps"] for s in p["snaps"])
            last = now
        except (OSError, rados.Error) as e:  # a cluster that is down: try again next pass
            print(f"snaptrims: {e}", file=sys.stderr)
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"first_epoch": first, "last_epoch": last, "removed": removed,
                       "purged": purged, "unreadable_epochs": missed}, f)
        os.replace(tmp, out)
        if done:
            break
        for _ in range(10):
            if stop:
                break
            time.sleep(1)
    c.shutdown()


if __name__ == "__main__":
    main()
