#!/usr/bin/env bash
# The `weak-languages` recipe over seeds (results/training_runs.md, "Which settings cut weak languages'
# xsim error?"): each arm trained once per seed on FLORES-101 dev and the Tatoeba pairs of amh, swh, tam
# and khm, minus held-out lines (the last 200 of each evaluation file), then `eval xsim` (FLORES dev,
# 10 languages -> eng) and `eval tatoeba` (9 languages) on those lines, and `eval tatoeba` on 8 languages
# with no training line (what training may cost the rest); and the base model's xsim and the latter.
#
# usage: DATA=../shared/data MODEL=../shared/models/multilingual-e5-small-q4 OUT=/tmp/weak \
#          [ARMS="contrastive-margin0.3:300:--objectives contrastive;..."] [SEEDS="0 1 2"] [JOBS=1] \
#          [DEVICE=auto] examples/benchmarks/train_weak_languages.sh
# ARMS: NAME:STEPS:FLAGS;... (FLAGS added to `--recipe weak-languages`; the default: the recipe, and the
# recipe with distillation, which it had before; explicit objectives keep a row's meaning when the recipe
# changes). JOBS runs at once: 1 on a
# 2-core CPU (a 300-step run: 18 min on a quiet one), all of them on a GPU (an H200 trains 6 at once,
# 1200 steps each, in 3.3 min). Rows: appended to RESULTS (default results/weak_languages.json), one a
# run and one for the base, and its report rewritten (.md); the runs' files stay in OUT/runs.
set -uo pipefail
: "${DATA:?DATA: the shared data folder}" "${MODEL:?MODEL: the base model}" "${OUT:?OUT: a folder}"
ARMS=${ARMS:-"contrastive-margin0.3:300:--objectives contrastive;distill-margin0.3:300:--objectives contrastive,distill"}
SEEDS=${SEEDS:-"0 1 2"}; JOBS=${JOBS:-1}
DEVICE=${DEVICE:-auto}; PY=${PY:-python3}
RESULTS=${RESULTS:-$(dirname "$0")/results/weak_languages.json}
H=$OUT/heldout; mkdir -p "$H/flores" "$H/tatoeba" "$OUT/runs"
for l in eng amh swh tam yor khm deu fra rus zho_simpl ces; do
  tail -n 200 "$DATA/flores101/dev/$l.dev" > "$H/flores/$l.dev"; done
for l in amh swh tam khm deu fra rus cmn ces; do for side in $l eng; do
  tail -n 200 "$DATA/tatoeba/tatoeba.$l-eng.$side" > "$H/tatoeba/tatoeba.$l-eng.$side"; done; done
XSIM=(--data "$H/flores" --split dev --target eng --langs amh,swh,tam,yor,khm,deu,fra,rus,zho_simpl,ces)
TATOEBA=(--data "$H/tatoeba" --langs amh,swh,tam,khm,deu,fra,rus,cmn,ces)
UNSEEN=(--data "$DATA/tatoeba" --langs epo,ina,lat,bre,eus,tat,uig,kab)  # not in FLORES-101: never trained on

run() {  # NAME STEPS SEED FLAGS: train, then evaluate; its files in OUT/runs/NAME-seedSEED
  local r=$OUT/runs/$1-seed$3; mkdir -p "$r"
  rm -f "$r"/*.json  # a rerun that fails must not leave an earlier run's results to be collected
  local common=(--device "$DEVICE" --threads 2 --workdir "$r/work")
  # shellcheck disable=SC2086  # FLAGS are words
  $PY -m bitextmine train --data "$DATA/flores101/dev" $(for l in amh swh tam khm; do
      echo --data "$DATA/tatoeba/tatoeba.$l-eng.$l"; done) --exclude "$H" --base "$MODEL" \
    --recipe weak-languages --max-steps "$2" $4 --seed "$3" --device "$DEVICE" --threads 2 \
    --out "$r/model" --json "$r/train.json" > "$r/train.log" 2>&1 &&
  $PY -m bitextmine eval xsim "${XSIM[@]}" --model "$r/model" "${common[@]}" --json "$r/xsim.json" \
    > "$r/xsim.log" 2>&1 &&
  $PY -m bitextmine eval tatoeba "${TATOEBA[@]}" --model "$r/model" "${common[@]}" --json "$r/tatoeba.json" \
    > "$r/tatoeba.log" 2>&1 &&
  $PY -m bitextmine eval tatoeba "${UNSEEN[@]}" --model "$r/model" "${common[@]}" --json "$r/unseen.json" \
    > "$r/unseen.log" 2>&1 && echo "train_weak_languages: $1, seed $3 done" ||
  { echo "train_weak_languages: $1, seed $3 failed:"; tail -3 "$r"/*.log; }
}

b=$OUT/runs/base; mkdir -p "$b"
{ $PY -m bitextmine eval xsim "${XSIM[@]}" --model "$MODEL" --device "$DEVICE" --threads 2 \
    --workdir "$b/work" --json "$b/xsim.json" > "$b/xsim.log" 2>&1
  $PY -m bitextmine eval tatoeba "${UNSEEN[@]}" --model "$MODEL" --device "$DEVICE" --threads 2 \
    --workdir "$b/work" --json "$b/unseen.json" > "$b/unseen.log" 2>&1; } &
IFS=";" read -ra arms <<< "$ARMS"
for arm in "${arms[@]}"; do
  IFS=: read -r name steps flags <<< "$arm"
  for seed in $SEEDS; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run "$name" "$steps" "$seed" "$flags" &
  done
done
wait
$PY "$(dirname "$0")/weak_languages_rows.py" "$OUT/runs" "$RESULTS" "$ARMS"
