import glob,os,re,collections
agg=collections.defaultdict(lambda: collections.Counter())
for f in sorted(glob.glob('/tmp/r/net/*-n[01].txt')):
  L=open(f).read().splitlines()
  key=re.sub(r'-r\d+-n\d\.txt$','',os.path.basename(f))[:7]
  for a,b in zip(L[::2],L[1::2]):
    p=a.split()[0]
    for k,v in zip(a.split()[1:],b.split()[1:]):
      try: agg[key][p+k]+=int(v)
      except: pass
ks=sorted(agg)
print(' '*40, ' '.join(f'{k:>10s}' for k in ks))
for k in sorted(set().union(*[set(agg[x]) for x in ks])):
  v=[agg[x][k] for x in ks]
  if max(v)>=5 and (min(v)==0 or max(v)/max(min(v),1)>1.3): print(f"{k:40s} "+' '.join(f'{x:10d}' for x in v))
