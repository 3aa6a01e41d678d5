#!/usr/bin/python3
"""The instruction set a CPU benchmark runs with, and that ISA's f32 peak on this host.

The ISA is the best of AVX2 / AVX-512 / AMX that the CPU flags (/proc/cpuinfo) offer, lowered
to the oneDNN limit in ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA when one is set (the limit both
sides of a comparison run under, so that an AVX-512 host shows AVX2-class behaviour). The peak
is threads x clock x f32 flop per cycle of that ISA (2 per fused multiply-add, times the vector
lanes, times the FMA pipes): AVX2 32 (two 256-bit FMA pipes), AVX-512 64 (two 512-bit pipes)
except on AMD Zen 4 (family 25, which runs 512-bit vectors on its 256-bit pipes: 32). AMX adds
no f32 rate. The clock is lscpu's maximum where it has one, else /proc/cpuinfo's (what a
virtual machine reports, often the nominal clock). PEAK_GHZ and FLOP_PER_CYCLE override the
figures when the host's are known better.

    host_isa.py [THREADS]            prints one JSON line
    host_isa.py --text [THREADS]     prints one line for a human
"""
import json
import os
import re
import subprocess
import sys

ORDER = ["sse41", "avx2", "avx512", "amx"]


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_field(name):
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    return ""


def cpu_isa(flags):
    if "amx_tile" in flags and "avx512f" in flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    return "sse41"


def limit_isa(value):
    """oneDNN's ISA names (AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_AMX, ALL) -> ORDER."""
    v = value.strip().upper()
    if not v or v == "ALL":
        return None
    if "AMX" in v:
        return "amx"
    if "AVX512" in v:
        return "avx512"
    if "AVX2" in v:
        return "avx2"
    return "sse41"


def clock_ghz():
    if os.environ.get("PEAK_GHZ"):
        return float(os.environ["PEAK_GHZ"]), "PEAK_GHZ"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        m = re.search(r"CPU max MHz:\s*([\d.]+)", out)
        if m and float(m.group(1)) > 0:
            return float(m.group(1)) / 1000, "lscpu max"
    except OSError:
        pass
    mhz = cpu_field("cpu MHz")
    return (float(mhz) / 1000 if mhz else 0.0), "/proc/cpuinfo"


def flop_per_cycle(isa, vendor, family):
    if os.environ.get("FLOP_PER_CYCLE"):
        return int(os.environ["FLOP_PER_CYCLE"]), "FLOP_PER_CYCLE"
    if isa in ("avx512", "amx"):
        if vendor == "AuthenticAMD" and family == 25:
            return 32, "Zen 4: 512-bit FMA on two 256-bit pipes"
        return 64, "two 512-bit FMA pipes"
    if isa == "avx2":
        return 32, "two 256-bit FMA pipes"
    return 8, "SSE: two 128-bit pipes, no FMA"


def describe(threads):
    flags = cpu_flags()
    cpu = cpu_isa(flags)
    limit_var = next((v for v in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA") if os.environ.get(v)),
                     None)
    limit = limit_isa(os.environ[limit_var]) if limit_var else None
    isa = min(cpu, limit, key=ORDER.index) if limit else cpu
    vendor = cpu_field("vendor_id")
    family = int(cpu_field("cpu family") or 0)
    cores = os.cpu_count() or 1
    used = min(threads, cores)
    ghz, clock_source = clock_ghz()
    fpc, fpc_source = flop_per_cycle(isa, vendor, family)
    return {
        "isa": isa, "cpu_isa": cpu, "limit": f"{limit_var}={os.environ[limit_var]}" if limit_var
        else "", "model": cpu_field("model name"), "vendor": vendor, "family": family,
        "threads": used, "ghz": round(ghz, 3), "clock_source": clock_source,
        "flop_per_cycle": fpc, "flop_per_cycle_source": fpc_source,
        "peak_gflops": round(used * ghz * fpc, 1),
    }


def main():
    args = sys.argv[1:]
    text = "--text" in args
    args = [a for a in args if a != "--text"]
    d = describe(int(args[0]) if args else int(os.environ.get("OMP_NUM_THREADS", "2")))
    if not text:
        print(json.dumps(d))
        return
    names = {"avx2": "AVX2", "avx512": "AVX-512", "amx": "AMX", "sse41": "SSE4.1"}
    limited = f" (CPU: {names[d['cpu_isa']]}, limited by {d['limit']})" if d["limit"] else ""
    print(f"ISA {names[d['isa']]}{limited}; {d['model']} family {d['family']}; f32 peak "
          f"{d['peak_gflops']} GFLOP/s = {d['threads']} threads x {d['ghz']} GHz "
          f"({d['clock_source']}) x {d['flop_per_cycle']} flop/cycle ({d['flop_per_cycle_source']})")


if __name__ == "__main__":
    main()
