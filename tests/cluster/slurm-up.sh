#!/usr/bin/env bash
# Bring up a single-node SLURM cluster on this machine (Debian's slurm-wlm + munge, as root) for the
# cluster tests: partitions `cpu` (default) and `gpu` like profiles/slurm, two fake GPUs (gres type
# `fake`), no accounting database (the tests use `--slurm-status-command squeue`). Installs the
# packages when they are missing. Prints the daemons it started, one per line, to $1 (for slurm-down.sh).
set -euo pipefail
# the daemons, munged and runuser live in the system directories, which a user's (or CI's) PATH may lack
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
STARTED=${1:?usage: slurm-up.sh STARTED_FILE}
: > "$STARTED"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  # one apt-get at a time: the other test process may be installing the browser (tests/browser.py)
  flock /tmp/forgetmap-apt.lock sh -c 'apt-get update -q >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null'
fi
HOST=$(hostname -s)
CPUS=$(nproc)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=forgetmap-test
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroups on a CI machine: track processes by parent PID, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# every finished job, one line each: the tests read it to see what ran where
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# finished jobs stay visible to squeue/scontrol for 10 minutes (the status command needs >= 3x its delay)
MinJobAge=600
ReturnToService=2
MpiDefault=none
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEM_MB} Gres=gpu:fake:2 State=UNKNOWN
PartitionName=cpu Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=${HOST} Default=NO MaxTime=INFINITE State=UP
CONF
# two fake GPUs: gres needs a device file per GPU (/dev/null, /dev/zero); slurmd sets CUDA_VISIBLE_DEVICES
printf "NodeName=${HOST} Name=gpu Type=fake File=/dev/null\nNodeName=${HOST} Name=gpu Type=fake File=/dev/zero\n" > /etc/slurm/gres.conf
rm -f /etc/slurm/cgroup.conf /var/log/slurm/jobcomp.log
chown munge:munge /run/munge
if ! { [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged
  echo /run/munge/munged.pid >> "$STARTED"
fi
/usr/sbin/slurmctld -i
echo /run/slurmctld.pid >> "$STARTED"
/usr/sbin/slurmd
echo /run/slurmd.pid >> "$STARTED"
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && exit 0
  sleep 1
done
echo "slurm-up.sh: the node never became idle" >&2
sinfo -N -l >&2 || true
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
