// The kernels kvtier's GPU measurements launch (kvtier-bench calibrate, the
// GPU tests), as PTX for the oldest target the driver still compiles: the
// driver compiles them for the GPU at hand (cuModuleLoadData), so nothing
// here needs nvcc. tests/gpu checks each with ptxas where the toolkit has it.
// Thread-safety: constants.
#pragma once

namespace kvtier::bench {

// kvtier_touch(u8* base, u64 stride, u32 count, u32 value): thread i writes
// the low byte of `value` to base[i * stride]; one block of 128 threads per
// 128 touches. A touch of a page on the host is a GPU fault.
inline constexpr const char kTouchPtx[] = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry kvtier_touch(
    .param .u64 p_base,
    .param .u64 p_stride,
    .param .u32 p_count,
    .param .u32 p_value)
{
    .reg .pred %p;
    .reg .b16 %rs<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [p_base];
    ld.param.u64 %rd2, [p_stride];
    ld.param.u32 %r1, [p_count];
    ld.param.u32 %r2, [p_value];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r3, %r3, %r4, %r5;
    setp.ge.u32 %p, %r3, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    cvt.u64.u32 %rd3, %r3;
    mul.lo.u64 %rd4, %rd3, %rd2;
    add.u64 %rd5, %rd1, %rd4;
    cvt.u16.u32 %rs1, %r2;
    st.global.u8 [%rd5], %rs1;
DONE:
    ret;
}
)";

// kvtier_page_sums(u8* base, u64 page_bytes, u32 pages, u64* out): block b
// adds the 32-bit words of page b into out[b] (out zeroed first; the sum is
// of the words as unsigned numbers, modulo 2^64, so the order of the adds
// does not matter). Every byte of every page is read: what a decode step
// does to the KV of the sequences it serves, and a check of every byte.
// Launch with one block per page; page_bytes a multiple of 4.
inline constexpr const char kPageSumsPtx[] = R"(
.version 7.0
.target sm_52
.address_size 64

.visible .entry kvtier_page_sums(
    .param .u64 p_base,
    .param .u64 p_page,
    .param .u32 p_pages,
    .param .u64 p_out)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [p_base];
    ld.param.u64 %rd2, [p_page];
    ld.param.u32 %r1, [p_pages];
    ld.param.u64 %rd3, [p_out];
    mov.u32 %r2, %ctaid.x;
    setp.ge.u32 %p, %r2, %r1;
    @%p bra DONE;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd3, %rd3;
    cvt.u64.u32 %rd4, %r2;
    mul.lo.u64 %rd5, %rd4, %rd2;
    add.u64 %rd5, %rd1, %rd5;
    shr.u64 %rd6, %rd2, 2;
    cvt.u64.u32 %rd7, %r3;
    cvt.u64.u32 %rd8, %r4;
    mov.u64 %rd9, 0;
LOOP:
    setp.ge.u64 %p, %rd7, %rd6;
    @%p bra END;
    shl.b64 %rd10, %rd7, 2;
    add.u64 %rd11, %rd5, %rd10;
    ld.global.u32 %r5, [%rd11];
    cvt.u64.u32 %rd12, %r5;
    add.u64 %rd9, %rd9, %rd12;
    add.u64 %rd7, %rd7, %rd8;
    bra LOOP;
END:
    shl.b64 %rd13, %rd4, 3;
    add.u64 %rd14, %rd3, %rd13;
    atom.global.add.u64 %rd15, [%rd14], %rd9;
DONE:
    ret;
}
)";

}  // namespace kvtier::bench
