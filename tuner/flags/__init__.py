"""SGLang's command line, per version: the flag tables dumped from SGLang's own parser, the `argparse` parser
rebuilt from them, and the rules of its `--config` file.

Facts about SGLang, not about a server of the tuner's: the engines read them (which flags a version takes, what
its `--config` refuses) and the simulator parses its command line with them (tuner/sim/).
"""

from __future__ import annotations

from ._parser import build_parser, defaults, merge_config, parse_argv, refused_config_keys
from ._tables import VERSIONS, FlagSpec, table

__all__ = ["VERSIONS", "FlagSpec", "build_parser", "defaults", "merge_config", "parse_argv", "refused_config_keys",
           "table"]
