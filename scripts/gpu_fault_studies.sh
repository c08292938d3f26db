#!/usr/bin/env bash
# Issue 46's two fault studies on the lent GPU, chained in each device call so that no held minute idles:
# the known-answer model's (search_spaces/sglang-0.5.17-h100-known-answer-faults.yaml, 8 trials), then the 8B
# random model's (search_spaces/sglang-0.5.17-h100-llama3-8b-faults.yaml, 7 trials), each by
# scripts/gpu_sglang.sh run in a study folder of its own. Here, first:
#   GPU_STUDY_DB=docs/gpu-sglang-0517-faults/known-answer/trials.db GPU_STUDY_DIR=/tmp/gpu-ka-faults \
#       bash scripts/gpu_sglang.sh prepare          # goes on from the trials recorded there
# then, as many calls as it takes (the machine held between them):
#   run(command="bash scripts/gpu_fault_studies.sh", carry=[".whl/gpu-sglang"], timeout_s=600)
# and in the last one FINISH=1 (the 8B study, or FINISH_KA=1 the known-answer one, is interrupted and reported).
# CALL_S: the call's seconds (default 575). Each study comes back as one tar, o-ka.tar and o-8b.tar (a call
# brings back at most 8 files), and the newest JIT caches as jit.tar.xz.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-/tmp/gpu-out}" t0=$SECONDS end=${CALL_S:-575}
ka_db=/tmp/gpu-ka-faults/trials.db
ka_done() { [ -f "$ka_db" ] && bash "$repo/scripts/gpu_sglang.sh" study-done "$ka_db" 8; }

if ! ka_done; then
    OUT=/tmp/o-ka GPU_MODEL=known-answer GPU_STUDY_DIR=/tmp/gpu-ka-faults GPU_TRIALS=8 \
        GPU_SPACE=search_spaces/sglang-0.5.17-h100-known-answer-faults.yaml GPU_FINISH="${FINISH_KA:-}" \
        GPU_BUDGET_S=$(( end - (SECONDS - t0) )) bash "$repo/scripts/gpu_sglang.sh" run
    cp /tmp/known-answer/accuracy.json /tmp/o-ka/ 2>/dev/null
fi
left=$(( end - (SECONDS - t0) ))
if ka_done && [ "$left" -gt 200 ]; then
    OUT=/tmp/o-8b GPU_STUDY_DIR=/tmp/gpu-faults-8b GPU_TRIALS=7 \
        GPU_SPACE=search_spaces/sglang-0.5.17-h100-llama3-8b-faults.yaml GPU_FINISH="${FINISH:-}" \
        GPU_BUDGET_S=$left bash "$repo/scripts/gpu_sglang.sh" run
fi
mkdir -p "$out"
for d in o-ka o-8b; do [ -d "/tmp/$d" ] && tar -cf "$out/$d.tar" --exclude=jit.tar.xz -C /tmp "$d"; done
# The newest JIT caches come back once, beside the tars: `take` puts them in the carry, so that the next
# session's first flashinfer start skips its JIT (about 240 s on a fresh machine).
jit=$(ls -t /tmp/o-8b/jit.tar.xz /tmp/o-ka/jit.tar.xz 2>/dev/null | head -1)
[ -n "$jit" ] && cp "$jit" "$out/"
ls -la "$out"
