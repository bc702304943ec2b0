#!/usr/bin/env python3
"""Per-kernel table of every launch in an ncu --csv --page raw capture
(for example one step bracketed by COHORT_CUDA_PROFILE_ROWS): launches, ms,
share of kernel time, DRAM GB/s and tensor-pipe activity, by kernel name.

ncu-table.py CSV
"""
import csv,sys
from collections import defaultdict
lines=[l for l in open(sys.argv[1]) if l.startswith('"')]
r=csv.reader(lines); h=next(r); next(r)
ix={k:h.index(k) for k in h}
agg=defaultdict(lambda:[0,0.0,0.0,0.0])
tot=0
for v in r:
    f=lambda k: float(v[ix[k]].replace(",","") or 0)
    n=v[ix["Kernel Name"]]; ns=f("gpu__time_duration.sum"); b=f("dram__bytes_read.sum")+f("dram__bytes_write.sum")
    tc=f("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")
    a=agg[n]; a[0]+=1; a[1]+=ns; a[2]+=b; a[3]+=tc*ns
    tot+=ns
print("launches %d, kernel time %.2f ms"%(sum(a[0] for a in agg.values()), tot/1e6))
print("| kernel | launches | ms | % | GB/s | tensor % |")
for n,(c,ns,b,tc) in sorted(agg.items(), key=lambda kv:-kv[1][1]):
    print("| %s | %d | %.3f | %.1f | %.0f | %.0f |"%(n[:60],c,ns/1e6,100*ns/tot,b/ns,tc/ns))
