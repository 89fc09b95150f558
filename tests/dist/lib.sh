# tests/dist/lib.sh: what the data-parallel tests share; source after
# tests/lib.sh. Skips (exit 77) without mpirun or an MPI-enabled xfrun; sets
# mpi (the launcher with its flags) and defines curve_close.
command -v mpirun >/dev/null || { echo "skipped: no MPI (mpirun not found)"; exit 77; }
strings "$xfrun" | grep -q MPI_Init || { echo "skipped: xfrun was built without MPI"; exit 77; }
mpi=(mpirun --oversubscribe -np)
[ "$(id -u)" -eq 0 ] && mpi=(mpirun --allow-run-as-root --oversubscribe -np)

# curve_close A.csv B.csv: the same 20 steps, loss within 1e-5 relative per step
curve_close() {
  python3 - "$1" "$2" <<'PY'
import csv, sys
a = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
b = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"worst relative difference {worst:.1e} over {len(a)} steps")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
