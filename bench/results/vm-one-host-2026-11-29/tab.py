import csv,collections,statistics,sys
B=sys.argv[2].split()
maxb=int(sys.argv[3]) if len(sys.argv)>3 else 1<<40
d=collections.defaultdict(list)
for c,b,r,by,us in csv.reader(open(sys.argv[1])): d[(c,int(by),b)].append(float(us))
for c,by in sorted({(k[0],k[1]) for k in d}):
  if by>maxb: continue
  m=[statistics.median(d[(c,by,b)]) for b in B]
  print(f"{c[:22]:22s} {by//1024:6d}K "+" ".join(f"{mm:8.2f}[{min(d[(c,by,b)]):.2f}-{max(d[(c,by,b)]):.2f}]" for b,mm in zip(B,m))+f"  B/A {m[1]/m[0]:.2f} null {m[2]/m[1]:.2f}")
