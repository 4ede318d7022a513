#!/usr/bin/env bash
# The bundled sample as the jobs use it: SQuAD v1.1 dev split by article (the first 40 articles to
# train on, the last 8 to evaluate), prepared on 2 MPI ranks into DIR/shards/{train,eval}, with
# their statistics beside them. Kept when already there. MPIBERT_BIN_DIR: where mpibert-prep is
# (default build/bin; tools/container/main_job_in_image.sh gives the image's). SHARDS, when given, is where
# the shards go instead (jobs/local.sh: the site's SHARDS_DIR).
#   scripts/sample_shards.sh DIR [SHARDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dir=${1:?usage: scripts/sample_shards.sh DIR [SHARDS]}
shards=${2:-$dir/shards}
squad=data_prep/data/squad/dev-v1.1.json.gz
bin=${MPIBERT_BIN_DIR:-build/bin}
mkdir -p "$dir/data"
for part in train eval; do
  [ -f "$shards/$part/manifest.json" ] && continue
  if [ "$part" = train ]; then articles=0:-8; else articles=-8:48; fi
  "$bin/mpibert-prep" split "$squad" --articles "$articles" --out "$dir/data/$part.json"
  RANKS=2 jobs/prep_squad.sh "$dir/data/$part.json" "$shards/$part" "$part" --log-level warn
  "$bin/mpibert-prep" inspect "$shards/$part" > "$dir/prep_stats_$part.json"
done
