# Sourced by the many-rank benchmarks (many_rank_kineto.sh,
# many_rank_by_file.sh) with their arguments: the first four, [MOETRACE]
# [RANKS] [MB] [DIR] (MB's default the caller's $default_mb), and
# make_template, which writes the Kineto trace their rank files repeat: the
# HTA NCCL test trace grown to about MB megabytes by make_big_kineto.py, as
# DIR/template.json.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
moetrace=${1:-build/ci/bin/moetrace}
ranks=${2:-1024}
mb=${3:-$default_mb}
dir=${4:-$(mktemp -d)}
make_template() {
  python3 "$here/make_big_kineto.py" --source "$here/../../shared/data/external/kineto/hta-nccl_data.json.gz" \
    --mb "$mb" "$dir/template.json"
}
