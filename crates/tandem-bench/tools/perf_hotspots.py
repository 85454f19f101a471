import sys, re, collections
inner = collections.Counter(); incl = collections.Counter(); total = 0
stack = []
def flush():
    global total
    if not stack: return
    total += 1
    # stack[0] is innermost
    seen=set()
    inn=None
    for fr in stack:
        if 'tandem::' in fr or 'tandem_bench' in fr:
            if inn is None: inn = fr
            if fr not in seen:
                incl[fr]+=1; seen.add(fr)
    inner[inn or '(outside tandem) '+stack[0]] += 1
for line in open(sys.argv[1], errors='replace'):
    if not line.strip():
        flush(); stack=[]; continue
    if line[0] in ' \t':
        parts=line.strip().split(' ',1)
        if len(parts)==2:
            sym=re.sub(r'\+0x[0-9a-f]+$','',parts[1].rsplit(' (',1)[0])
            stack.append(sym)
flush()
print("total samples", total)
print("== innermost tandem frame (self + non-tandem callees such as malloc, memcmp, bson)")
for k,v in inner.most_common(25): print(f"{100*v/total:5.1f}%  {k[:150]}")
print("== inclusive")
for k,v in incl.most_common(45): print(f"{100*v/total:5.1f}%  {k[:150]}")
