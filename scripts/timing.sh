# Shared by the interleaved benchmark scripts (sourced, with $tmp set to a
# scratch folder): whole-command wall times and their median.

seconds() { # runs "$@", prints its wall time in seconds; its output goes to $tmp/log
    local start end timer=()
    # GNU time, where there is one, keeps the command's CPU time for `cpu_seconds`.
    rm -f "$tmp/cpu"
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -f '%U %S' -o "$tmp/cpu")
    start=$(date +%s.%N)
    "${timer[@]}" "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; echo "failed: $*" >&2; exit 1; }
    end=$(date +%s.%N)
    echo "$end - $start" | bc
}

cpu_seconds() { # the CPU seconds (user + system, children included) of the last `seconds`
    if [ -s "$tmp/cpu" ]; then awk '{print $1 + $2}' "$tmp/cpu"; else echo nan; fi
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

rounded() { # the seconds given, one decimal each, comma-separated
    printf '%.1f\n' "$@" | paste -sd, - | sed 's/,/, /g'
}
