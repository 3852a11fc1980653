/* A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), for tests on a machine without a GPU:
 * the real nvidia-ml-py bindings load it by its soname and call it as they call the driver's. It serves one
 * device whose values come from the file named by NVML_STANDIN (lines "key value", see h100_*.txt): clocks,
 * power, temperature, clock event reasons and modes as read; the energy counter and the power and thermal
 * violation times grow with wall time at the file's rates. Its compute processes are the calling process and
 * `other_processes` others (pid 1: never a trial's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; } proc_t;
typedef struct { unsigned long long referenceTime, violationTime; } violation_t;

static char name[96] = "stand-in", uuid[96] = "GPU-00000000-0000-0000-0000-000000000000";
static double v_sm, v_mem, v_max_sm, v_power, v_limit, v_default_limit, v_temp, v_reasons, v_energy_rate,
    v_thermal_share, v_power_share, v_ecc, v_mig, v_others, v_memory;
static double started;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    const char *path = getenv("NVML_STANDIN");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 12; /* NVML_ERROR_LIBRARY_NOT_FOUND */
    char key[64], value[96];
    struct { const char *k; double *v; } keys[] = {
        {"sm_clock", &v_sm}, {"mem_clock", &v_mem}, {"max_sm_clock", &v_max_sm}, {"power_mw", &v_power},
        {"limit_mw", &v_limit}, {"default_limit_mw", &v_default_limit}, {"temp_c", &v_temp},
        {"reasons", &v_reasons}, {"energy_mw", &v_energy_rate}, {"thermal_held_share", &v_thermal_share},
        {"power_held_share", &v_power_share}, {"ecc", &v_ecc}, {"mig", &v_mig},
        {"other_processes", &v_others}, {"process_memory", &v_memory}};
    while (fscanf(f, "%63s %95s", key, value) == 2) {
        if (key[0] == '#') { int c; while ((c = fgetc(f)) != '\n' && c != EOF) {} continue; }
        if (!strcmp(key, "name")) { strncpy(name, value, sizeof name - 1); for (char *p = name; *p; p++) if (*p == '_') *p = ' '; }
        else if (!strcmp(key, "uuid")) strncpy(uuid, value, sizeof uuid - 1);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) if (!strcmp(key, keys[i].k)) *keys[i].v = strtod(value, NULL);
    }
    fclose(f);
    started = now();
    return 0;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int result) { return result == 12 ? "NVML Shared Library Not Found" : "stand-in error"; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) { if (index) return 2; *device = (void *)1; return 0; }
int nvmlDeviceGetHandleByUUID(const char *id, void **device) { if (strcmp(id, uuid)) return 6; *device = (void *)1; return 0; }
int nvmlDeviceGetName(void *d, char *out, unsigned int n) { (void)d; snprintf(out, n, "%s", name); return 0; }
int nvmlDeviceGetUUID(void *d, char *out, unsigned int n) { (void)d; snprintf(out, n, "%s", uuid); return 0; }
int nvmlDeviceGetClockInfo(void *d, int type, unsigned int *mhz) { (void)d; *mhz = (unsigned int)(type == 1 ? v_sm : v_mem); return 0; }
int nvmlDeviceGetMaxClockInfo(void *d, int type, unsigned int *mhz) { (void)d; *mhz = (unsigned int)(type == 1 ? v_max_sm : v_mem); return 0; }
int nvmlDeviceGetPowerUsage(void *d, unsigned int *mw) { (void)d; *mw = (unsigned int)v_power; return 0; }
int nvmlDeviceGetEnforcedPowerLimit(void *d, unsigned int *mw) { (void)d; *mw = (unsigned int)v_limit; return 0; }
int nvmlDeviceGetPowerManagementDefaultLimit(void *d, unsigned int *mw) { (void)d; *mw = (unsigned int)v_default_limit; return 0; }
int nvmlDeviceGetTemperature(void *d, int sensor, unsigned int *c) { (void)d; (void)sensor; *c = (unsigned int)v_temp; return 0; }
int nvmlDeviceGetCurrentClocksEventReasons(void *d, unsigned long long *r) { (void)d; *r = (unsigned long long)v_reasons; return 0; }
int nvmlDeviceGetTotalEnergyConsumption(void *d, unsigned long long *mj) {
    (void)d; *mj = 123456789ULL + (unsigned long long)((now() - started) * v_energy_rate); return 0;
}
int nvmlDeviceGetViolationStatus(void *d, int policy, violation_t *v) {
    (void)d;
    double share = policy == 0 ? v_power_share : policy == 1 ? v_thermal_share : 0.0;
    v->referenceTime = 0; v->violationTime = (unsigned long long)((now() - started) * share * 1e9); return 0;
}
int nvmlDeviceGetEccMode(void *d, int *current, int *pending) { (void)d; *current = *pending = (int)v_ecc; return 0; }
int nvmlDeviceGetMigMode(void *d, unsigned int *current, unsigned int *pending) { (void)d; *current = *pending = (unsigned int)v_mig; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned int *count, proc_t *procs) {
    (void)d;
    unsigned int n = 1 + (unsigned int)v_others;
    if (!procs) { *count = n; return 7; } /* NVML_ERROR_INSUFFICIENT_SIZE */
    if (*count < n) { *count = n; return 7; }
    for (unsigned int i = 0; i < n; i++) {
        procs[i].pid = i ? 1 : (unsigned int)getpid();
        procs[i].usedGpuMemory = (unsigned long long)v_memory; procs[i].gpuInstanceId = procs[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = n;
    return 0;
}
