/*
 * edgeplug's process-exit watcher: a pidfd (pidfd_open(2), Linux 5.3) per
 * watched process, polled by libuv on the agent's own event loop, so a
 * process that exits wakes the agent once and nothing wakes it otherwise.
 * Node 24 has no pidfd API; this is the smallest Node-API module that
 * gives one (src/platform/process-watch.ts loads it; scripts/build.ts builds
 * it for each target with gcc and embeds it in the executable).
 *
 *   open(pid)            -> a pidfd (>= 0), or -errno
 *   watch(fd, onExit)    -> a handle; onExit() is called once the process
 *                           has exited (the fd turns readable), after which
 *                           the handle is closed
 *   close(handle)        -> stops watching and closes the fd; safe twice
 *   closeFd(fd)          -> closes a pidfd that was never watched
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <node_api.h>
#include <uv.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* the same number on x86-64 and arm64 */
#endif

typedef struct {
  uv_poll_t poll;
  napi_env env;
  napi_ref on_exit;
  int fd;
  int closing;
} watch_t;

static napi_value number(napi_env env, int value) {
  napi_value result;
  napi_create_int32(env, value, &result);
  return result;
}

static int int_arg(napi_env env, napi_callback_info info, size_t wanted, napi_value *args, int32_t *first) {
  size_t count = wanted;
  if (napi_get_cb_info(env, info, &count, args, NULL, NULL) != napi_ok || count < wanted) return -1;
  if (napi_get_value_int32(env, args[0], first) != napi_ok) return -1;
  return 0;
}

static napi_value open_pidfd(napi_env env, napi_callback_info info) {
  napi_value args[1];
  int32_t pid;
  if (int_arg(env, info, 1, args, &pid) != 0 || pid <= 0) {
    napi_throw_type_error(env, NULL, "open(pid): pid must be a positive integer");
    return NULL;
  }
  long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
  return number(env, fd < 0 ? -errno : (int)fd);
}

static void on_closed(uv_handle_t *handle) {
  watch_t *watch = (watch_t *)handle->data;
  close(watch->fd);
  free(watch);
}

/* Stops polling and frees everything once libuv is done with the handle. */
static void stop(watch_t *watch) {
  if (watch->closing) return;
  watch->closing = 1;
  napi_delete_reference(watch->env, watch->on_exit);
  watch->on_exit = NULL;
  uv_poll_stop(&watch->poll);
  uv_close((uv_handle_t *)&watch->poll, on_closed);
}

static void on_readable(uv_poll_t *poll, int status, int events) {
  (void)status;
  (void)events;
  watch_t *watch = (watch_t *)poll->data;
  if (watch->closing) return;
  napi_env env = watch->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value callback, global, ignored;
  int have_callback = napi_get_reference_value(env, watch->on_exit, &callback) == napi_ok && callback != NULL;
  napi_get_global(env, &global);
  stop(watch);
  /* Through node::MakeCallback, so that promises and nextTicks it queues run after it. */
  if (have_callback) napi_make_callback(env, NULL, global, callback, 0, NULL, &ignored);
  napi_close_handle_scope(env, scope);
}

static napi_value watch_pidfd(napi_env env, napi_callback_info info) {
  napi_value args[2];
  int32_t fd;
  napi_valuetype type;
  if (int_arg(env, info, 2, args, &fd) != 0 || fd < 0 || napi_typeof(env, args[1], &type) != napi_ok || type != napi_function) {
    napi_throw_type_error(env, NULL, "watch(fd, onExit): a pidfd and a function");
    return NULL;
  }
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
    napi_throw_error(env, NULL, "watch: no event loop");
    return NULL;
  }
  watch_t *watch = calloc(1, sizeof(*watch));
  if (watch == NULL) {
    napi_throw_error(env, NULL, "watch: out of memory");
    return NULL;
  }
  watch->env = env;
  watch->fd = fd;
  watch->poll.data = watch;
  int failed = uv_poll_init(loop, &watch->poll, fd);
  if (failed != 0) {
    free(watch);
    napi_throw_error(env, NULL, uv_strerror(failed));
    return NULL;
  }
  napi_create_reference(env, args[1], 1, &watch->on_exit);
  /* The agent's servers keep it alive; a watch alone never does. */
  uv_unref((uv_handle_t *)&watch->poll);
  failed = uv_poll_start(&watch->poll, UV_READABLE, on_readable);
  if (failed != 0) {
    stop(watch);
    napi_throw_error(env, NULL, uv_strerror(failed));
    return NULL;
  }
  napi_value handle;
  napi_create_external(env, watch, NULL, NULL, &handle);
  return handle;
}

static napi_value close_watch(napi_env env, napi_callback_info info) {
  size_t count = 1;
  napi_value args[1];
  void *data = NULL;
  if (napi_get_cb_info(env, info, &count, args, NULL, NULL) != napi_ok || count < 1 || napi_get_value_external(env, args[0], &data) != napi_ok) {
    napi_throw_type_error(env, NULL, "close(handle): a handle from watch()");
    return NULL;
  }
  /* A handle whose process exited was freed when its callback ran: the JS side drops it then and never closes it. */
  stop((watch_t *)data);
  return NULL;
}

static napi_value close_fd(napi_env env, napi_callback_info info) {
  napi_value args[1];
  int32_t fd;
  if (int_arg(env, info, 1, args, &fd) != 0 || fd < 0) {
    napi_throw_type_error(env, NULL, "closeFd(fd): a pidfd");
    return NULL;
  }
  close(fd);
  return NULL;
}

NAPI_MODULE_INIT(/* napi_env env, napi_value exports */) {
  napi_property_descriptor properties[] = {
      {"open", NULL, open_pidfd, NULL, NULL, NULL, napi_enumerable, NULL},
      {"watch", NULL, watch_pidfd, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, close_watch, NULL, NULL, NULL, napi_enumerable, NULL},
      {"closeFd", NULL, close_fd, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof(properties) / sizeof(properties[0]), properties);
  return exports;
}
