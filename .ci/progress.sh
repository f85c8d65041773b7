# progress LABEL LOG CMD...: runs CMD and prints a line every 10 seconds
# while it runs (its time so far and, when LOG is a file, the last line CMD
# wrote there), so a long setup step is never silent. Returns CMD's status.
progress() {
  local label=$1 log=$2
  shift 2
  "$@" &
  local pid=$! t=0 line
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    t=$((t + 1))
    if ((t % 10 == 0)) && kill -0 "$pid" 2>/dev/null; then
      line=""
      [ -n "$log" ] && [ -f "$log" ] && line=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-90)
      echo "  $label: ${t}s${line:+ · $line}"
    fi
  done
  wait "$pid"
}
