// What a file that writes asio coroutines needs before any asio header (tcp_transport.cc,
// tcp_channel.cc, tls_session.cc). Include it first, and end that file with
//   #ifdef WC_NET_POP_NO_SANITIZE_FUNCTION
//   #pragma clang attribute pop
//   #endif
#pragma once

// asio's io_context uses std::atomic_thread_fence, which gcc 12 flags under -fsanitize=thread
// (-Wtsan: TSan does not model fences). The fences order asio's own bookkeeping; our state is
// guarded by mutexes, which TSan does check.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wtsan"
#endif

// asio 1.22 recognises clang's coroutines only through libc++'s
// <experimental/coroutine>; with libstdc++ (Debian's clang builds: fuzz,
// sanitizers) the standard <coroutine> works as well.
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT) && defined(__cpp_impl_coroutine) && \
    __has_include(<coroutine>)
#define ASIO_HAS_CO_AWAIT 1
#endif
// clang 14's -fsanitize=function (part of "undefined") emits prologue data that
// the backend cannot encode for coroutine functions ("Cannot represent a
// difference across sections", llvm-project issue 49689); keep that one check
// off in the including file, the other sanitizers stay.
#if defined(__clang__) && __clang_major__ < 17
#pragma clang attribute push(__attribute__((no_sanitize("function"))), apply_to = function)
#define WC_NET_POP_NO_SANITIZE_FUNCTION 1
#endif
