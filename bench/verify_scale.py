"""A full verification of the evidence log over the data set `scale.py` made: the tree against a
signed head, then every leaf's row as it stands (the background verifier's pass), timed.

Signs a head of the log as loaded (the key in `--data-dir`), then runs the verifier's full pass
(admin_app.integrity.verifier.run_pass: evidence.verify.check over the leaf rows in chunks, then
integrity.covered.mismatches a chunk of leaves at a time), the way `bailing-admin evidence check`
and the background verifier run it. Without that module (an older tree): verify.check, then
covered.mismatches in keyset chunks of `--chunk` leaves. Prints leaves, seconds, leaves/s of each
part and the process's peak resident memory; last, one JSON line.

    python bench/verify_scale.py --json var/scale.json [--data-dir var/verify-scale]
"""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from common import PROJECT_ROOT, finish

from admin_app import create_app
from admin_app.evidence import heads, log, verify
from admin_app.integrity import covered


def peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def rows_in_chunks(database, size: int, chunk: int) -> dict:
    """covered.mismatches over every leaf below `size`, a keyset chunk at a time."""
    checked, bad, first = 0, 0, None
    while checked < size:
        with database.session() as db:
            rows = log.leaf_rows(db, checked, chunk, size)
            found = covered.mismatches(db, rows)
        if not rows:
            break
        bad += len(found)
        first = first or (found[0] if found else None)
        checked = rows[-1][0] + 1
    return {"leaves_checked": checked, "bad_leaves": bad, "first_bad": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="var/scale.json", help="the file scale.py wrote (its database_url)")
    parser.add_argument("--data-dir", default="var/verify-scale", help="the signing key's folder")
    parser.add_argument("--chunk", type=int, default=10_000, help="leaves per chunk (fallback pass)")
    parser.add_argument("--parts", action="store_true", help="also time the tree and the rows apart")
    args = parser.parse_args()
    url = json.loads(Path(args.json).read_text())["database_url"]
    data_dir = PROJECT_ROOT / args.data_dir
    app = create_app({"database_url": url, "data_dir": data_dir})
    database = app.extensions["bailing"].db
    figures: dict = {"database": url.rsplit("/", 1)[-1]}

    with database.session() as db:
        size = log.size(db)
        started = time.perf_counter()
        head = heads.make_head(db, data_dir)
        figures["head_seconds"] = round(time.perf_counter() - started, 2)
    figures["tree_size"] = head["tree_size"]
    print(f"log of {size:,} leaves; head signed over {head['tree_size']:,} in {figures['head_seconds']} s", flush=True)

    try:
        from admin_app.integrity import verifier
    except ImportError:
        verifier = None  # type: ignore[assignment]
    started = time.perf_counter()
    if verifier is not None and hasattr(verifier, "run_pass"):
        figures["pass"] = "integrity.verifier.run_pass"
        report = verifier.run_pass(database)
    else:
        figures["pass"] = f"verify.check + covered.mismatches in chunks of {args.chunk}"
        with database.session() as db:
            report = verify.check(db)
        report.update(rows_in_chunks(database, size, args.chunk))
    seconds = time.perf_counter() - started
    figures.update(full_pass_seconds=round(seconds, 1), leaves_per_s=round(size / seconds),
                   ok=bool(report.get("ok")), bad_leaves=report.get("bad_leaves"),
                   first_bad_leaf=report.get("first_bad_leaf"), problem=report.get("problem"),
                   peak_rss_mib_after_pass=peak_mib())
    print(f"full pass ({figures['pass']}): {seconds:.1f} s, {figures['leaves_per_s']:,} leaves/s, "
          f"ok={figures['ok']}, peak RSS {figures['peak_rss_mib_after_pass']} MiB", flush=True)

    if args.parts:
        started = time.perf_counter()
        with database.session() as db:
            tree = verify.check(db)
        figures["tree_seconds"] = round(time.perf_counter() - started, 1)
        figures["tree_ok"] = tree["ok"]
        started = time.perf_counter()
        rows = rows_in_chunks(database, size, args.chunk)
        figures["rows_seconds"] = round(time.perf_counter() - started, 1)
        figures["rows_bad"] = rows["bad_leaves"]
        figures["peak_rss_mib"] = peak_mib()
        print(f"  tree alone (verify.check): {figures['tree_seconds']} s, ok={tree['ok']}; rows alone "
              f"(covered.mismatches, chunks of {args.chunk}): {figures['rows_seconds']} s, "
              f"{rows['bad_leaves']} bad; peak RSS {figures['peak_rss_mib']} MiB", flush=True)
    database.dispose()
    finish("verify_scale", figures)


if __name__ == "__main__":
    main()
