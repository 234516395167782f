"""The public reshard suite (docs/conventions.md) for Python: reads its one
copy, bench/workloads/public_suite.txt (the file's header describes the
columns), as the C++ reader bench/workloads/public_suite.h does.

    sys.path.insert(0, os.path.join(REPO, "bench", "workloads"))
    import public_suite
    for case in public_suite.load(tag="paper"):
        case["name"], case["shape"], case["src_mesh"]   # "case1", [1024, ...], (2, 4)

Each case is a dict: name, tags (list), shape and small_shape (lists of
ints, int32 elements), src_mesh and dst_mesh ((hosts, devices per host)),
src_spec and dst_spec. The file is $MESHCAST_PUBLIC_SUITE when set, else the
one next to this module. A malformed file raises ValueError naming the file,
line and column. Python 3 standard library only.
"""

import os

ENV = "MESHCAST_PUBLIC_SUITE"
COLUMNS = ["name", "tags", "shape", "src_mesh", "src_spec", "dst_mesh",
           "dst_spec", "small_shape"]


def default_path():
    return os.environ.get(ENV) or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "public_suite.txt")


def _ints(text, where, column, count=None):
    try:
        values = [int(part) for part in text.split("x")]
    except ValueError:
        values = []
    if not values or min(values) <= 0 or (count and len(values) != count):
        raise ValueError("%s: column '%s': %r is not %s" %
                         (where, column, text, "a mesh HOSTSxDEVICES" if count
                          else "a shape such as 1024x1024x512"))
    return values


def parse(text, path="<text>"):
    """The cases of a suite file's text, in file order."""
    cases, names = [], set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = "%s:%d" % (path, number)
        fields = line.split()
        if len(fields) != len(COLUMNS):
            raise ValueError("%s: %d fields, want %d (%s)" %
                             (where, len(fields), len(COLUMNS),
                              " ".join(COLUMNS)))
        case = dict(zip(COLUMNS, fields))
        case["tags"] = case["tags"].split(",")
        if "" in case["tags"]:
            raise ValueError("%s: column 'tags': %r has an empty tag" %
                             (where, fields[1]))
        for column in ("shape", "small_shape"):
            case[column] = _ints(case[column], where, column)
        for column in ("src_mesh", "dst_mesh"):
            case[column] = tuple(_ints(case[column], where, column, 2))
        if len(case["small_shape"]) != len(case["shape"]):
            raise ValueError("%s: column 'small_shape': %d dimensions, but "
                             "shape has %d" % (where, len(case["small_shape"]),
                                               len(case["shape"])))
        if case["name"] in names:
            raise ValueError("%s: column 'name': %r appears twice" %
                             (where, case["name"]))
        names.add(case["name"])
        cases.append(case)
    if not cases:
        raise ValueError("%s: no cases" % path)
    return cases


def load(path=None, tag=None):
    """The suite's cases (those carrying `tag`, if given), in file order."""
    path = path or default_path()
    with open(path, encoding="utf-8") as f:
        cases = parse(f.read(), path)
    return [c for c in cases if tag is None or tag in c["tags"]]
