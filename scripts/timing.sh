# Shared by the interleaved benchmark scripts (sourced, with $tmp set to a
# scratch folder): whole-command wall times and their median.

seconds() { # runs "$@", prints its wall time in seconds; its output goes to $tmp/log
    local start end
    start=$(date +%s.%N)
    "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; echo "failed: $*" >&2; exit 1; }
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

rounded() { # the seconds given, one decimal each, comma-separated
    printf '%.1f\n' "$@" | paste -sd, - | sed 's/,/, /g'
}
