#!/bin/sh
# A one-node Slurm cluster in folder DIR, for tests/training/test_slurm.py:
#     slurm_cluster.sh start DIR CPUS    # munged, slurmctld, slurmd; SLURM_CONF=DIR/slurm.conf
#     slurm_cluster.sh stop DIR          # ends the three daemons it started
# Needs Debian's slurm-wlm and munge (tests/run.sh installs them).
# Everything it writes is under DIR; the daemons run as this user (root: munged --force).
set -eu
command=$1
dir=$(realpath "$2")

stop() {
    for name in slurmd slurmctld munged; do
        if [ -f "$dir/$name.pid" ]; then
            kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
            rm -f "$dir/$name.pid"
        fi
    done
}

if [ "$command" = stop ]; then
    stop
    exit 0
fi
cpus=$3
if ! command -v srun >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm_cluster.sh: srun or munged is missing: install slurm-wlm and munge" >&2
    exit 1
fi
host=$(hostname -s)
user=$(id -un)
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$dir/munge/munge.key"
munged --force --key-file "$dir/munge/munge.key" --socket "$dir/munge/socket" \
    --pid-file "$dir/munged.pid" --log-file "$dir/munged.log" --seed-file "$dir/munge/seed"
cat > "$dir/slurm.conf" <<EOF
ClusterName=vtxtest
SlurmctldHost=$host
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Job ids, and with them the workers' ports (vtx.training.distribute.SLURM_PORT_BASE), apart
# from those of another cluster this script started (tests run side by side).
FirstJobId=$(( ($$ % 300) * 40 + 1 ))
SlurmctldPort=$((17000 + $$ % 1000))
SlurmdPort=$((18000 + $$ % 1000))
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld
slurmd
# Ready when the node takes jobs.
for _ in $(seq 60); do
    if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
        exit 0
    fi
    sleep 1
done
echo "the one-node Slurm cluster in $dir did not come up; its logs:" >&2
tail -n 20 "$dir"/*.log >&2
exit 1
