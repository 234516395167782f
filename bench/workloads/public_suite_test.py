#!/usr/bin/env python3
"""Tests of public_suite.py: it reads the suite file as the C++ reader does
(the same cases in the same order), and malformed files are errors naming
the line and column. Standalone: python3 bench/workloads/public_suite_test.py
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import public_suite  # noqa: E402


class PublicSuiteTest(unittest.TestCase):

    def test_the_file_holds_the_papers_cases_and_one_to_many(self):
        cases = public_suite.load()
        self.assertEqual([c["name"] for c in cases], [
            "case1", "case2", "case3", "case4", "case5", "case6", "case7",
            "case9", "1-to-m(1,1)", "1-to-m(1,2)", "1-to-m(1,3)",
            "1-to-m(1,4)", "1-to-m(2,2)", "1-to-m(3,2)", "1-to-m(4,2)"])
        self.assertEqual(len(public_suite.load(tag="paper")), 8)
        self.assertEqual([c["name"] for c in public_suite.load(tag="gpu")],
                         ["case1", "case2", "case3", "case4", "case5",
                          "case9"])
        case7 = cases[6]
        self.assertEqual(case7["shape"], [1024, 1024, 512])
        self.assertEqual(case7["src_mesh"], (1, 4))
        self.assertEqual(case7["dst_mesh"], (2, 4))
        self.assertEqual((case7["src_spec"], case7["dst_spec"]),
                         ("S1RR", "RRR"))
        self.assertEqual(case7["small_shape"], [64, 64, 256])

    def test_the_variable_names_the_file(self):
        old = os.environ.get(public_suite.ENV)
        os.environ[public_suite.ENV] = "/nonexistent/suite.txt"
        try:
            with self.assertRaises(OSError):
                public_suite.load()
        finally:
            if old is None:
                del os.environ[public_suite.ENV]
            else:
                os.environ[public_suite.ENV] = old

    def test_malformed_lines_name_line_and_column(self):
        for line, error in [
                ("a t 8x4 1x2 S0R 2x1", "t:2: 6 fields, want 8"),
                ("a t 8xq 1x2 S0R 2x1 RS0 2x4", "t:2: column 'shape'"),
                ("a t 8x4 2 S0R 2x1 RS0 2x4", "column 'src_mesh'"),
                ("a t,,u 8x4 1x2 S0R 2x1 RS0 2x4", "column 'tags'"),
                ("a t 8x4 1x2 S0R 2x1 RS0 2x4x1", "column 'small_shape'")]:
            with self.assertRaisesRegex(ValueError, error.replace("(", r"\(")):
                public_suite.parse("# header\n" + line + "\n", "t")
        with self.assertRaisesRegex(ValueError, "appears twice"):
            public_suite.parse("a t 8 1x1 R 1x1 R 8\na t 8 1x1 R 1x1 R 8\n")
        with self.assertRaisesRegex(ValueError, "no cases"):
            public_suite.parse("# only a comment\n")


if __name__ == "__main__":
    unittest.main()
