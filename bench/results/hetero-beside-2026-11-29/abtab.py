import csv,sys,statistics as st,collections
rows=list(csv.reader(open(sys.argv[1])))
base=sys.argv[2] if len(sys.argv)>2 else 'A'
d=collections.defaultdict(list); sides=[]
for r in rows:
    rnd,op,side=r[0],r[1],r[2]; rest=r[3:]
    if rest[0]=='op' or len(rest)<13: continue
    if side not in sides: sides.append(side)
    d[(op,int(rest[2]),side,'oop')].append(float(rest[8])); d[(op,int(rest[2]),side,'ip')].append(float(rest[12]))
keys=sorted(set((k[0],k[1],k[3]) for k in d))
print("op bytes mode | "+" | ".join(f"{s} med us" for s in sides)+" | "+" | ".join(f"{s}/{base}" for s in sides if s!=base))
for op,b,m in keys:
    med={s:st.median(d[(op,b,s,m)]) for s in sides if d[(op,b,s,m)]}
    print(f"{op} {b>>20}M {m} | "+" | ".join(f"{med[s]:.0f}" for s in sides)+" | "+" | ".join(f"{med[s]/med[base]:.2f} ("+" ".join(f"{y/x:.2f}" for x,y in zip(d[(op,b,base,m)],d[(op,b,s,m)]))+")" for s in sides if s!=base))
