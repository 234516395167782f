#!/usr/bin/env python3
"""`meshcast-controller --help` and `meshcast-worker --help` list their flags.

Abseil's default --help filter keeps only flags defined in a file named
after the program, so the daemons used to print "No flags matched"
(util/flags_usage.h fixes the filter). Runs each binary with --help and
--helpshort and checks that flags it certainly has appear, and that the
"No flags matched" message and Abseil's own flags (--flagfile) do not.

  check_daemon_help.py CONTROLLER_BINARY WORKER_BINARY
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_test_util import Checker, run  # noqa: E402

EXPECTED = {
    # Flags that predate this test and are part of the documented CLI.
    "meshcast-controller": ["--listen", "--db", "--metrics_port", "--inter_gbps", "--intra_gbps",
                            "--lease_seconds"],
    "meshcast-worker": ["--controller", "--listen", "--devices", "--name", "--data_address",
                        "--metrics_port"],
}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    c = Checker()
    for binary in sys.argv[1:]:
        name = os.path.basename(binary)
        for flag in ("--help", "--helpshort"):
            r = run([binary, flag], timeout=30)
            text = r.stdout + r.stderr
            # Abseil exits 1 after printing usage; a crash or timeout is not that.
            c.check(r.returncode in (0, 1), f"{name} {flag}: exit code {r.returncode}")
            c.check("No flags matched" not in text, f"{name} {flag}: 'No flags matched'")
            for want in EXPECTED[name]:
                c.check(f"{want} " in text or f"{want}(" in text or f"{want}\n" in text,
                        f"{name} {flag}: {want} is not listed")
            c.check("--flagfile" not in text, f"{name} {flag}: lists Abseil's own flags")
            print(f"{name} {flag}: {sum(1 for l in text.splitlines() if l.lstrip().startswith('--'))} flags")
    c.finish()


if __name__ == "__main__":
    main()
