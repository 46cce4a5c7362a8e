#!/usr/bin/env bash
# Nsight Compute stall breakdown of the first panel_cluster_kernel launch (cuda/blocked/panel_cluster.cu) for a few
# shapes (GPU machine).
set -u
for shape in "20 32" "640 512" "2 4096"; do
  set -- $shape
  echo "=== batch=$1 n=$2"
  ncu --clock-control none --kernel-name regex:panel_cluster --launch-count 1 \
      --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
      python3 -c "import torch, qr2_op; A=torch.randn($1,$2,$2,device='cuda'); torch.ops.qr2.geqrf(A); torch.cuda.synchronize()" 2>&1 \
    | grep -E "Duration|Registers|Warp Cycles Per Issued|Stall|Issued Warp|No Eligible|Active Warps|Theoretical Occ|Achieved Occ|Block Size|Grid Size|Cluster" | head -40
done
