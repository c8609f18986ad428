import re,sys
p=sys.argv[1]; s=open(p).read()
old="""    for (int i = 0; i < opts_.iters; ++i) launch();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;"""
new="""    static char line[1 << 16];
    int len = 0;
    auto prev = start;
    for (int i = 0; i < opts_.iters; ++i) {
      launch();
      const auto now = std::chrono::steady_clock::now();
      if (len < (1 << 16) - 32)
        len += std::snprintf(line + len, sizeof line - len, " %.0f",
                             std::chrono::duration<double, std::micro>(now - prev).count());
      prev = now;
    }
    if (std::getenv("BENCH_ITER_TIMES") != nullptr) std::fprintf(stderr, "ITERS%s\\n", line);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;"""
assert old in s; s=s.replace(old,new)
if "<cstdlib>" not in s: s=s.replace("#include <chrono>","#include <chrono>\n#include <cstdlib>\n#include <cstdio>")
open(p,'w').write(s)
