// C entry points of windows, window memory and registered buffers (include/loom/loom.h).
#include "api/handle.hpp"
#include "loom/loom.h"

using namespace loom;

struct loomWindow {
  static constexpr uint64_t kMagic = 0x4c4f4f4d57494e44ull;  // "LOOMWIND"
  uint64_t magic = kMagic;
  loomComm_t comm = nullptr;
  uint64_t id = 0;
};

struct loomRegistration {
  static constexpr uint64_t kMagic = 0x4c4f4f4d52454753ull;  // "LOOMREGS"
  uint64_t magic = kMagic;
  loomComm_t comm = nullptr;
  uint64_t id = 0;
};

namespace {

loomRegistration* checkRegistration(loomComm_t comm, loomRegistration_t handle) {
  LOOM_CHECK_ARG(handle != nullptr && handle->magic == loomRegistration::kMagic,
                 "handle is not a registration");
  LOOM_CHECK_ARG(handle->comm == comm, "buffer was registered with another communicator");
  return handle;
}

loomWindow* checkWindow(loomComm_t comm, loomWindow_t win) {
  LOOM_CHECK_ARG(win != nullptr && win->magic == loomWindow::kMagic, "win is not a window");
  LOOM_CHECK_ARG(win->comm == comm, "window was registered with another communicator");
  return win;
}

}  // namespace

loomResult_t loomMemAlloc(loomComm_t comm, void** ptr, size_t size) {
  return guarded("loomMemAlloc", [&] {
    LOOM_CHECK_ARG(ptr != nullptr, "ptr is NULL");
    *ptr = nullptr;
    HandleUse use(comm);
    *ptr = use.comm().allocateMemory(size);
    return loomSuccess;
  });
}

loomResult_t loomMemFree(loomComm_t comm, void* ptr) {
  return guarded("loomMemFree", [&] {
    HandleUse use(comm);
    use.comm().releaseMemory(ptr);
    return loomSuccess;
  });
}

loomResult_t loomCommWindowRegister(loomComm_t comm, void* buff, size_t size, loomWindow_t* win,
                                    int flags) {
  return guarded("loomCommWindowRegister", [&] {
    LOOM_CHECK_ARG(win != nullptr, "win is NULL");
    *win = nullptr;
    LOOM_CHECK_ARG((flags & ~LOOM_WIN_COLL_SYMMETRIC) == 0, "unknown window flags ", flags);
    HandleUse use(comm);
    auto w = std::make_unique<loomWindow>();
    w->comm = comm;
    w->id = use.comm().registerWindow(buff, size, (flags & LOOM_WIN_COLL_SYMMETRIC) != 0);
    *win = w.release();
    return loomSuccess;
  });
}

loomResult_t loomCommWindowDeregister(loomComm_t comm, loomWindow_t win) {
  return guarded("loomCommWindowDeregister", [&] {
    loomWindow* w = checkWindow(comm, win);
    HandleUse use(comm);
    use.comm().deregisterWindow(w->id);
    w->magic = 0;
    delete w;
    return loomSuccess;
  });
}

loomResult_t loomCommWindowIsDirect(loomComm_t comm, loomWindow_t win, int* direct) {
  return guarded("loomCommWindowIsDirect", [&] {
    LOOM_CHECK_ARG(direct != nullptr, "direct is NULL");
    loomWindow* w = checkWindow(comm, win);
    HandleUse use(comm);
    *direct = use.comm().windowUsed(w->id) ? 1 : 0;
    return loomSuccess;
  });
}

loomResult_t loomCommRegister(loomComm_t comm, void* buff, size_t size,
                              loomRegistration_t* handle) {
  return guarded("loomCommRegister", [&] {
    LOOM_CHECK_ARG(handle != nullptr, "handle is NULL");
    *handle = nullptr;
    HandleUse use(comm);
    auto r = std::make_unique<loomRegistration>();
    r->comm = comm;
    r->id = use.comm().registerBuffer(buff, size);
    *handle = r.release();
    return loomSuccess;
  });
}

loomResult_t loomCommDeregister(loomComm_t comm, loomRegistration_t handle) {
  return guarded("loomCommDeregister", [&] {
    loomRegistration* r = checkRegistration(comm, handle);
    HandleUse use(comm);
    use.comm().deregisterBuffer(r->id);
    r->magic = 0;
    delete r;
    return loomSuccess;
  });
}

loomResult_t loomCommRegistrationIsDirect(loomComm_t comm, loomRegistration_t handle, int* direct) {
  return guarded("loomCommRegistrationIsDirect", [&] {
    LOOM_CHECK_ARG(direct != nullptr, "direct is NULL");
    loomRegistration* r = checkRegistration(comm, handle);
    HandleUse use(comm);
    *direct = use.comm().bufferRegistrationUsed(r->id) ? 1 : 0;
    return loomSuccess;
  });
}
