"""Names a generated C file must not use for the user's tensors, loops and sizes.

The C that ``codegen_c`` emits includes ``stdint.h``, ``stdio.h``, ``stdlib.h``,
``math.h`` and ``omp.h`` (tensor intrinsics may add ``immintrin.h``). A user
name equal to one of their macros (``INFINITY``, ``NULL``, ``EOF``, ``M_PI``)
is replaced by the preprocessor, and one equal to a function or type they
declare (``sin``, ``abs``, ``FILE``) shadows it or clashes with it, so every
such name is renamed (``c_identifier`` in ``loop_ir``), as are C keywords,
names starting with an underscore (reserved to the implementation) and the
generator's own names (``pt_*``, ``GENERATED_LOCALS``).

The tables were collected from glibc's and gcc's headers, once, with

    printf '#include <%s>\\n' stdint.h stdio.h stdlib.h math.h omp.h > h.c
    cc -dM -E h.c; cc -mavx512f -mavx2 -mfma -dM -E immintrin.c    # macros
    cc -E -fopenmp h.c | grep -v '^#' | grep -oE '\\b[A-Za-z][A-Za-z0-9_]*\\b'   # declarations

keeping the names that do not start with an underscore. They are fixed data,
the same on every host (the code for a target must not depend on the machine
that generates it); other C libraries' extra names are covered by
``LIBC_EXTRA``.
"""

from __future__ import annotations

C_KEYWORDS = frozenset(
    """auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof
    _Atomic _Generic _Noreturn _Static_assert _Thread_local asm typeof bool true false""".split()
)

# macros the included headers define (cc -dM -E)
HEADER_MACROS = frozenset(
    """
    BIG_ENDIAN BUFSIZ BYTE_ORDER EOF EXIT_FAILURE EXIT_SUCCESS FD_CLR FD_ISSET FD_SET
    FD_SETSIZE FD_ZERO FILENAME_MAX FOPEN_MAX FP_ILOGB0 FP_ILOGBNAN FP_INFINITE FP_NAN
    FP_NORMAL FP_SUBNORMAL FP_ZERO HUGE_VAL HUGE_VALF HUGE_VALL INFINITY INT16_C INT16_MAX
    INT16_MIN INT32_C INT32_MAX INT32_MIN INT64_C INT64_MAX INT64_MIN INT8_C INT8_MAX
    INT8_MIN INTMAX_C INTMAX_MAX INTMAX_MIN INTPTR_MAX INTPTR_MIN INT_FAST16_MAX
    INT_FAST16_MIN INT_FAST32_MAX INT_FAST32_MIN INT_FAST64_MAX INT_FAST64_MIN INT_FAST8_MAX
    INT_FAST8_MIN INT_LEAST16_MAX INT_LEAST16_MIN INT_LEAST32_MAX INT_LEAST32_MIN
    INT_LEAST64_MAX INT_LEAST64_MIN INT_LEAST8_MAX INT_LEAST8_MIN LITTLE_ENDIAN L_ctermid
    L_tmpnam MATH_ERREXCEPT MATH_ERRNO MB_CUR_MAX M_1_PI M_2_PI M_2_SQRTPI M_E M_LN10 M_LN2
    M_LOG10E M_LOG2E M_PI M_PI_2 M_PI_4 M_SQRT1_2 M_SQRT2 NAN NFDBITS NULL PDP_ENDIAN
    PTRDIFF_MAX PTRDIFF_MIN P_tmpdir RAND_MAX SEEK_CUR SEEK_END SEEK_SET SIG_ATOMIC_MAX
    SIG_ATOMIC_MIN SIZE_MAX TMP_MAX UINT16_C UINT16_MAX UINT32_C UINT32_MAX UINT64_C
    UINT64_MAX UINT8_C UINT8_MAX UINTMAX_C UINTMAX_MAX UINTPTR_MAX UINT_FAST16_MAX
    UINT_FAST32_MAX UINT_FAST64_MAX UINT_FAST8_MAX UINT_LEAST16_MAX UINT_LEAST32_MAX
    UINT_LEAST64_MAX UINT_LEAST8_MAX WCHAR_MAX WCHAR_MIN WCONTINUED WEXITED WEXITSTATUS
    WIFCONTINUED WIFEXITED WIFSIGNALED WIFSTOPPED WINT_MAX WINT_MIN WNOHANG WNOWAIT WSTOPPED
    WSTOPSIG WTERMSIG WUNTRACED alloca be16toh be32toh be64toh fpclassify htobe16 htobe32
    htobe64 htole16 htole32 htole64 isfinite isgreater isgreaterequal isinf isless
    islessequal islessgreater isnan isnormal isunordered le16toh le32toh le64toh linux
    math_errhandling offsetof signbit stderr stdin stdout unix
    """.split()
)

# functions, types, globals (and struct members) the included headers declare (cc -E)
HEADER_DECLARATIONS = frozenset(
    """
    FILE a64l abort abs acos acosf acosh acoshf acoshl acosl aligned_alloc arc4random
    arc4random_buf arc4random_uniform asin asinf asinh asinhf asinhl asinl at_quick_exit
    atan atan2 atan2f atan2l atanf atanh atanhf atanhl atanl atexit atof atoi atol atoll
    blkcnt_t blksize_t bsearch caddr_t calloc cbrt cbrtf cbrtl ceil ceilf ceill clearenv
    clearerr clearerr_unlocked clock_t clockid_t copysign copysignf copysignl cos cosf cosh
    coshf coshl cosl ctermid daddr_t dev_t div div_t double_t dprintf drand48 drand48_data
    drand48_r drem dremf dreml ecvt ecvt_r end_ptr erand48 erand48_r erf erfc erfcf erfcl
    erff erfl exit exp exp2 exp2f exp2l expf expl expm1 expm1f expm1l fabs fabsf fabsl
    fclose fcvt fcvt_r fd_mask fd_set fdim fdimf fdiml fdopen feof feof_unlocked ferror
    ferror_unlocked fflush fflush_unlocked fgetc fgetc_unlocked fgetpos fgets fileno
    fileno_unlocked finite finitef finitel float_t flockfile floor floorf floorl fma fmaf
    fmal fmax fmaxf fmaxl fmemopen fmin fminf fminl fmod fmodf fmodl fopen fpos_t fprintf
    fptr fputc fputc_unlocked fputs fread fread_unlocked free freopen frexp frexpf frexpl
    fsblkcnt_t fscanf fseek fseeko fsetpos fsfilcnt_t fsid_t ftell ftello ftrylockfile
    funlockfile fwrite fwrite_unlocked gamma gammaf gammal gcvt getc getc_unlocked getchar
    getchar_unlocked getdelim getenv getline getloadavg getsubopt getw gid_t hypot hypotf
    hypotl id_t ilogb ilogbf ilogbl initstate initstate_r ino_t int16_t int32_t int64_t
    int8_t int_fast16_t int_fast32_t int_fast64_t int_fast8_t int_least16_t int_least32_t
    int_least64_t int_least8_t intmax_t intptr_t isinff isinfl isnanf isnanl j0 j0f j0l j1
    j1f j1l jn jnf jnl jrand48 jrand48_r key key_t l64a labs lcong48 lcong48_r ldexp ldexpf
    ldexpl ldiv ldiv_t lgamma lgamma_r lgammaf lgammaf_r lgammal lgammal_r llabs lldiv
    lldiv_t llrint llrintf llrintl llround llroundf llroundl loff_t log log10 log10f log10l
    log1p log1pf log1pl log2 log2f log2l logb logbf logbl logf logl lrand48 lrand48_r lrint
    lrintf lrintl lround lroundf lroundl malloc mblen mbstowcs mbtowc mkdtemp mkstemp
    mkstemps mktemp mode_t modf modff modfl mrand48 mrand48_r nan nanf nanl nearbyint
    nearbyintf nearbyintl nextafter nextafterf nextafterl nexttoward nexttowardf nexttowardl
    nlink_t nrand48 nrand48_r off_t omp_aligned_alloc omp_aligned_calloc omp_alloc
    omp_allocator_handle_t omp_alloctrait_key_t omp_alloctrait_t omp_alloctrait_value_t
    omp_atk_access omp_atk_alignment omp_atk_fallback omp_atk_fb_data omp_atk_partition
    omp_atk_pinned omp_atk_pool_size omp_atk_sync_hint omp_atv_abort_fb omp_atv_all
    omp_atv_allocator_fb omp_atv_blocked omp_atv_cgroup omp_atv_contended omp_atv_default
    omp_atv_default_mem_fb omp_atv_environment omp_atv_false omp_atv_interleaved
    omp_atv_nearest omp_atv_null_fb omp_atv_private omp_atv_pteam omp_atv_sequential
    omp_atv_serialized omp_atv_thread omp_atv_true omp_atv_uncontended omp_calloc
    omp_capture_affinity omp_cgroup_mem_alloc omp_const_mem_alloc omp_const_mem_space
    omp_default_mem_alloc omp_default_mem_space omp_depend_t omp_destroy_allocator
    omp_destroy_lock omp_destroy_nest_lock omp_display_affinity omp_display_env
    omp_event_handle_t omp_free omp_fulfill_event omp_get_active_level
    omp_get_affinity_format omp_get_ancestor_thread_num omp_get_cancellation
    omp_get_default_allocator omp_get_default_device omp_get_device_num omp_get_dynamic
    omp_get_initial_device omp_get_level omp_get_max_active_levels omp_get_max_task_priority
    omp_get_max_teams omp_get_max_threads omp_get_nested omp_get_num_devices
    omp_get_num_places omp_get_num_procs omp_get_num_teams omp_get_num_threads
    omp_get_partition_num_places omp_get_partition_place_nums omp_get_place_num
    omp_get_place_num_procs omp_get_place_proc_ids omp_get_proc_bind omp_get_schedule
    omp_get_supported_active_levels omp_get_team_num omp_get_team_size
    omp_get_teams_thread_limit omp_get_thread_limit omp_get_thread_num omp_get_wtick
    omp_get_wtime omp_high_bw_mem_alloc omp_high_bw_mem_space omp_in_final omp_in_parallel
    omp_init_allocator omp_init_lock omp_init_lock_with_hint omp_init_nest_lock
    omp_init_nest_lock_with_hint omp_is_initial_device omp_large_cap_mem_alloc
    omp_large_cap_mem_space omp_lock_hint_contended omp_lock_hint_none
    omp_lock_hint_nonspeculative omp_lock_hint_speculative omp_lock_hint_t
    omp_lock_hint_uncontended omp_lock_t omp_low_lat_mem_alloc omp_low_lat_mem_space
    omp_memspace_handle_t omp_nest_lock_t omp_null_allocator omp_pause_hard
    omp_pause_resource omp_pause_resource_all omp_pause_resource_t omp_pause_soft
    omp_proc_bind_close omp_proc_bind_false omp_proc_bind_master omp_proc_bind_primary
    omp_proc_bind_spread omp_proc_bind_t omp_proc_bind_true omp_pteam_mem_alloc omp_realloc
    omp_sched_auto omp_sched_dynamic omp_sched_guided omp_sched_monotonic omp_sched_static
    omp_sched_t omp_set_affinity_format omp_set_default_allocator omp_set_default_device
    omp_set_dynamic omp_set_lock omp_set_max_active_levels omp_set_nest_lock omp_set_nested
    omp_set_num_teams omp_set_num_threads omp_set_schedule omp_set_teams_thread_limit
    omp_sync_hint_contended omp_sync_hint_none omp_sync_hint_nonspeculative
    omp_sync_hint_speculative omp_sync_hint_t omp_sync_hint_uncontended omp_target_alloc
    omp_target_associate_ptr omp_target_disassociate_ptr omp_target_free
    omp_target_is_present omp_target_memcpy omp_target_memcpy_rect omp_test_lock
    omp_test_nest_lock omp_thread_mem_alloc omp_uintptr_t omp_unset_lock omp_unset_nest_lock
    on_exit open_memstream pclose perror pid_t popen posix_memalign pow powf powl printf
    pselect pthread_attr_t pthread_barrier_t pthread_barrierattr_t pthread_cond_t
    pthread_condattr_t pthread_key_t pthread_mutex_t pthread_mutexattr_t pthread_once_t
    pthread_rwlock_t pthread_rwlockattr_t pthread_spinlock_t pthread_t putc putc_unlocked
    putchar putchar_unlocked putenv puts putw qecvt qecvt_r qfcvt qfcvt_r qgcvt qsort quad_t
    quick_exit quot rand rand_deg rand_r rand_sep rand_type random random_data random_r
    realloc reallocarray realpath register_t rem remainder remainderf remainderl remove
    remquo remquof remquol rename renameat rewind rint rintf rintl round roundf roundl
    rpmatch rptr scalb scalbf scalbl scalbln scalblnf scalblnl scalbn scalbnf scalbnl scanf
    seed48 seed48_r select setbuf setbuffer setenv setlinebuf setstate setstate_r setvbuf
    signgam significand significandf significandl sigset_t sin sinf sinh sinhf sinhl sinl
    size_t snprintf sprintf sqrt sqrtf sqrtl srand srand48 srand48_r srandom srandom_r
    sscanf ssize_t state strtod strtof strtol strtold strtoll strtoq strtoul strtoull
    strtouq suseconds_t system tan tanf tanh tanhf tanhl tanl tempnam tgamma tgammaf tgammal
    time_t timer_t timespec timeval tmpfile tmpnam tmpnam_r trunc truncf truncl tv_nsec
    tv_sec tv_usec u_char u_int u_int16_t u_int32_t u_int64_t u_int8_t u_long u_quad_t
    u_short uid_t uint uint16_t uint32_t uint64_t uint8_t uint_fast16_t uint_fast32_t
    uint_fast64_t uint_fast8_t uint_least16_t uint_least32_t uint_least64_t uint_least8_t
    uintmax_t uintptr_t ulong ungetc unsetenv ushort va_list valloc value vdprintf vfprintf
    vfscanf vprintf vscanf vsnprintf vsprintf vsscanf wchar_t wcstombs wctomb y0 y0f y0l y1
    y1f y1l yn ynf ynl
    """.split()
)

# libc / libm names other C libraries (musl, macOS) or other headers commonly add
LIBC_EXTRA = frozenset(
    """errno assert memcpy memmove memset memcmp strlen strcmp strcpy main environ
    isfinite isinf isnan signbit fpclassify complex imaginary I""".split()
)

# identifiers the generated function declares itself (besides the pt_ prefix)
GENERATED_LOCALS = frozenset({"status"})

RESERVED = C_KEYWORDS | HEADER_MACROS | HEADER_DECLARATIONS | LIBC_EXTRA | GENERATED_LOCALS
