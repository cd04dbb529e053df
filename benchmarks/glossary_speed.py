"""Time of `vtx.inference.glossary.Glossary.targets_in` on a line of spaces, the worst line a
client can send: two slots a character (`vtx.inference.glossary.slots`), every one looked up.

For each (line length, number of terms) a glossary of that many random one- to three-word terms
(plus "U.S.", "C++" and "a  b", terms whose non-word characters are slots too) is built, then
searches a line of that many spaces; and a request's glossary of `--request-terms` terms over
the largest one (`Glossary.updated`) searches the longest line. A row each: the build's and the
search's seconds, the fastest of `--repeat` searches.

Usage: python benchmarks/glossary_speed.py [--spaces 450000,900000] [--terms 2500,20000]
       [--request-terms 2500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from vtx.inference.glossary import Glossary


def random_glossary(count: int, seed: int) -> Glossary:
    """`count` random terms of one to three lowercase words, each its own target."""
    rng = random.Random(seed)
    terms = {" ".join("".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 9)))
                      for _ in range(rng.randint(1, 3))) for _ in range(count)}
    return Glossary(tuple((term, term) for term in sorted(terms) + ["U.S.", "C++", "a  b"]))


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default="450000,900000", help="line lengths, comma-separated")
    parser.add_argument("--terms", default="2500,20000", help="glossary sizes, comma-separated")
    parser.add_argument("--request-terms", type=int, default=2500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("glossary line_chars build_s search_s")
    glossaries = {}
    for count in map(int, args.terms.split(",")):
        build, glossaries[count] = timed(lambda: random_glossary(count, seed=count))
        for spaces in map(int, args.spaces.split(",")):
            line = " " * spaces
            search = min(timed(lambda: glossaries[count].targets_in(line))[0]
                         for _ in range(args.repeat))
            print(f"{count} {spaces} {build:.3f} {search:.3f}")
    own_build, own = timed(lambda: random_glossary(args.request_terms, seed=0))
    server = max(glossaries)
    line = " " * max(map(int, args.spaces.split(",")))
    search = min(timed(lambda: glossaries[server].updated(own).targets_in(line))[0]
                 for _ in range(args.repeat))
    print(f"{server}+{args.request_terms} {len(line)} {own_build:.3f} {search:.3f}")


if __name__ == "__main__":
    main()
