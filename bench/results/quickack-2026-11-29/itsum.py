import glob,statistics,os,collections,re
agg=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob('/tmp/r/it/*.txt')):
  rows=[[float(x) for x in l.split()[1:]] for l in open(f) if l.startswith('ITERS')]
  if not rows: continue
  key=re.sub(r'-r\d+\.txt$','',os.path.basename(f))
  slow=[max(c) for c in zip(*rows)]
  m=statistics.median(slow)
  a=agg[key]; a['med'].append(m); a['nobig'].append(statistics.mean([x for x in slow if x<=2*m]))
  a['big'].append(sum(1 for x in slow if x>2*m)); a['n'].append(len(slow)); a['mean'].append(statistics.mean(slow))
  a['bigms'].append(sum(x for x in slow if x>2*m)/1000)
for k,a in agg.items():
  print(f"{k[:60]:60s} jobs {len(a['med'])} med-of-med {statistics.median(a['med']):5.0f} mean-nobig {statistics.mean(a['nobig']):5.0f} mean {statistics.mean(a['mean']):5.0f} big/100 {100*sum(a['big'])/sum(a['n']):4.1f} bigms/job {statistics.mean(a['bigms']):5.1f}")
