import csv,collections,statistics,sys
B=sys.argv[2].split()
d=collections.defaultdict(list)
for c,b,r,by,us in csv.reader(open(sys.argv[1])): d[(c,int(by),b)].append(float(us))
keep=set(int(x) for x in sys.argv[3].split()) if len(sys.argv)>3 else None
for c,by in sorted({(k[0],k[1]) for k in d}):
  if keep and by not in keep: continue
  m=[statistics.median(d[(c,by,b)]) if d[(c,by,b)] else float('nan') for b in B]
  s=f"{c[:34]:34s} {by//1024:7d}K " + " ".join(f"{b[:4]}:{mm:7.0f}[{min(d[(c,by,b)]):.0f}-{max(d[(c,by,b)]):.0f}]" for b,mm in zip(B,m))
  s+=f"  {B[-2][:4]}/A {m[-2]/m[0]:.2f}"
  if len(B)>3: s+=f" null {m[-1]/m[-2]:.2f}"
  print(s)
