#!/usr/bin/env python3
"""Layout figures of issue #11: functions over 80 lines, files over 600 lines
(each count also split into product code and the tools under src/tools/),
non-test files outside src/dialect naming a Dialect variant, import circles
between top-level modules (comments ignored). Usage: scripts/measure_layout.py [ROOT]"""
import re,os,sys,subprocess
root=sys.argv[1] if len(sys.argv)>1 else '.'
os.chdir(root)
files=[]
for d,_,fs in os.walk('src'):
    for f in fs:
        if f.endswith('.rs'): files.append(os.path.join(d,f))
files.sort()
def is_test_file(p):
    b=os.path.basename(p)
    return b.endswith('_tests.rs') or b=='tests.rs' or '/tests/' in p or b in ('testkit.rs','testing.rs','scenarios.rs','session_scenarios.rs')
long=[]; big=[]; variant=[]
pat=re.compile(r'Dialect::(OpenaiChat|OpenaiResponses|Gemini|Anthropic)\b')
for p in files:
    src=open(p).read()
    lines=src.split('\n')
    if not is_test_file(p):
        # strip cfg(test) mod
        cut=len(lines)
        for i,l in enumerate(lines):
            if l.startswith('#[cfg(test)]') and i+1<len(lines) and re.match(r'mod \w+( \{|;)',lines[i+1]) and lines[i+1].rstrip().endswith('{'):
                cut=i;break
        prod=lines[:cut]
        n=len([l for l in prod])
        if n>600: big.append((n,p))
        # functions
        i=0
        while i<len(prod):
            m=re.match(r'\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?fn\s+(\w+)',prod[i])
            if m:
                depth=0; started=False; j=i
                while j<len(prod):
                    s=re.sub(r'"(\\.|[^"\\])*"','',prod[j]); s=re.sub(r"'(\\.|[^'\\])'",'',s); s=s.split('//')[0]
                    for c in s:
                        if c=='{': depth+=1; started=True
                        elif c=='}': depth-=1
                    if started and depth<=0: break
                    if not started and s.rstrip().endswith(';'): break
                    j+=1
                if started and j-i+1>80: long.append((j-i+1,p,m.group(5)))
            i+=1
        if pat.search('\n'.join(prod)) and not p.startswith('src/dialect/'):
            variant.append((len(pat.findall('\n'.join(prod))),p))
def is_tool(p): return p.startswith('src/tools/')
def split(xs,path):
    tools=sum(1 for x in xs if is_tool(path(x)))
    return "(product %d, tools %d)"%(len(xs)-tools,tools)
print("functions >80 lines:",len(long),split(long,lambda x:x[1]))
for x in sorted(long,reverse=True): print("  ",x)
print("files >600 lines:",len(big),split(big,lambda x:x[1]))
for x in big: print("  ",x)
print("non-test files outside src/dialect naming a Dialect variant:",len(variant))
for x in variant: print("  ",x)
# import graph between top-level modules
mods=sorted(set(p.split('/')[1].replace('.rs','') for p in files if p.count('/')>=1))
mods=[m for m in mods if m not in ('lib','main')]
edges=set()
for p in files:
    if is_test_file(p): continue
    a=p.split('/')[1].replace('.rs','')
    if a in ('lib','main'): continue
    src=open(p).read()
    cut=src.find('#[cfg(test)]\nmod ')
    if cut>=0: src=src[:cut]
    src='\n'.join(l for l in src.split('\n') if not l.strip().startswith('//'))
    for m in re.finditer(r'crate::(\w+)',src):
        b=m.group(1)
        if b!=a and b in mods: edges.add((a,b))
    for m in re.finditer(r'use crate::\{([^}]*)\}',src,re.S):
        for b in re.findall(r'(?:^|[,{\s])(\w+)',m.group(1)):
            if b!=a and b in mods: edges.add((a,b))
cyc=sorted((a,b) for a,b in edges if (b,a) in edges and a<b)
print("2-circles between top-level modules:",len(cyc))
for x in cyc: print("  ",x)
# SCCs
import collections
g=collections.defaultdict(set)
for a,b in edges: g[a].add(b)
idx={};low={};st=[];on=set();res=[];c=[0]
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: res.append(sorted(comp))
for v in mods:
    if v not in idx: sc(v)
print("SCCs (>1 module):",res)
