"""Write search_spaces/knowledge/glm5-nvfp4-sm120.yaml: the seed story's failures, measured on the GLM-5 twin.

    python scripts/glm5_knowledge.py            # ~1.5 min on 2 cores; --trials N, --out FILE

The seed deployment (GLM-5-NVFP4 on 8 RTX PRO 6000 Blackwell, SM120, SGLang 0.5.6) spent most of its restarts
learning that the NSA backends (flashmla_*) load and then answer NaN, that they crash capturing CUDA graphs, and
that flashinfer and triton are no better there. The twin (`--simulate`, profile glm5-nvfp4-sm120) behaves so. A
search that avoids a backend family once a sibling failed may never try the others, so the story's attempts run
first (the seed space plus `try-first`: each NSA decode backend with graphs off, flashmla_kv with graphs on,
flashinfer, triton), then TPE for the rest of the trials. `knowledge export` then writes what the failures
showed. The study goes to a temporary folder; only the knowledge file is written here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SPACE = REPO / "search_spaces" / "glm5-nvfp4-sm120.yaml"
OUT = REPO / "search_spaces" / "knowledge" / "glm5-nvfp4-sm120.yaml"


def story_space() -> dict:
    space = yaml.safe_load(SPACE.read_text())
    baseline = space["baseline"]
    graphs_off = {**{k: v for k, v in baseline.items() if k != "cuda-graph-max-bs"}, "disable-cuda-graph": True}
    space["try-first"] = [
        {**baseline, "attention-backend": "nsa", "nsa-decode-backend": "flashmla_kv"},
        *({**graphs_off, "attention-backend": "nsa", "nsa-decode-backend": backend}
          for backend in ("flashmla_kv", "flashmla_sparse", "flashmla_auto")),
        {**baseline, "attention-backend": "flashinfer"},
        {**baseline, "attention-backend": "triton"},
    ]
    return space


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="glm5-knowledge-") as tmp:
        space = Path(tmp) / "glm5-nvfp4-sm120.yaml"
        space.write_text(yaml.safe_dump(story_space(), sort_keys=False))
        storage = f"sqlite:///{tmp}/trials.db"
        tuner = [sys.executable, "-m", "tuner"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([*tuner, "run", "--trials", str(args.trials), "--simulate", "--space", str(space),
                        "--storage", storage, "--workdir", f"{tmp}/runs", "--learn-from", "none"],
                       check=True, env=env, cwd=tmp)
        # `knowledge export`'s own work, with this script as the command that made the file (the study's folder
        # is gone once it is written).
        import optuna

        sys.path.insert(0, str(REPO))
        from tuner._files import write_atomically
        from tuner.search._knowledge import knowledge_of_study, render

        knowledge = knowledge_of_study(optuna.load_study(study_name="glm5-nvfp4-sm120", storage=storage))
        command = "python scripts/glm5_knowledge.py" + (f" --trials {args.trials}" if args.trials != 20 else "")
        write_atomically(Path(args.out), render(knowledge, "yaml", command))
        print(f"wrote {args.out}:", *(f"  {lesson.reads()}" for lesson in knowledge.lessons), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
