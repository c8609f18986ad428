import csv,sys,statistics
from collections import defaultdict
for run,bwfile in [('/tmp/f39',{16:2.344,64:2.330,256:2.499,'b':(2.228,2.508,2.464)}),('/tmp/v39',{16:2.305,64:2.207,256:1.862,'b':(1.652,1.745,2.059)})]:
    d=defaultdict(dict)
    for r in csv.DictReader(open(run+'/ab/ab.csv')):
        if r['shape']=='2x4' and r['transport']=='tcp' and r['op'] in('allreduce','allgather'):
            d[(r['op'],int(r['bytes']))][(r['build'],r['round'])]=float(r['us'])
    print(run)
    for op in ('allreduce','allgather'):
        for mb,i in ((16,0),(64,1),(256,2)):
            v=d[(op,mb<<20)]; rounds=sorted({x[1] for x in v})
            ba=[v[('B',x)]/v[('A',x)] for x in rounds]; nl=[v[('B2',x)]/v[('B',x)] for x in rounds]
            a=statistics.median(v[('A',x)] for x in rounds); b=statistics.median(v[('B',x)] for x in rounds)
            bw=max(bwfile[mb],bwfile['b'][i])  # better of two tcp_bw runs, GB/s per direction
            moved=(mb<<20)*(1 if op=='allreduce' else 0.5)
            bound=moved/bw/1e3  # us
            print('  %s %3d MiB: A %8.0f C %8.0f  C/A %.2f (%.2f-%.2f) null %.2f-%.2f  speedup %.2fx  bound %.0f us: C %.0f%%  A %.0f%%' % (op,mb,a,b,statistics.median(ba),min(ba),max(ba),min(nl),max(nl),a/b,bound,100*bound/b,100*bound/a))
