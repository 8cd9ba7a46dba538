// Crash-safe file replacement: readers of `target` see either the old
// contents or the new ones, never a torn mix, even if the process is killed
// or the machine loses power halfway through a save.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>

namespace tessel {

/// Writes a new version of `target` through `write`, then publishes it with
/// one rename.
///
/// The bytes go to a uniquely named temp file in the same folder (a rename
/// is only atomic within one file system), which is flushed and fsynced,
/// given the old file's mode (new files get 0644, narrowed by the umask),
/// renamed over `target`; finally the folder is fsynced so the rename itself
/// survives a power cut. On failure the temp file is removed and
/// `CheckpointError` names the path and the errno text; an exception thrown
/// by `write` removes the temp file and propagates unchanged. A symlink at
/// `target` is replaced by a regular file.
///
///   write_file_atomically("model.safetensors", [&](std::FILE* f) {
///     std::fwrite(bytes.data(), 1, bytes.size(), f);
///   });
///
/// `write` need not check fwrite's result: the stream's error flag is
/// checked after it returns.
void write_file_atomically(const std::filesystem::path& target,
                           const std::function<void(std::FILE*)>& write);

/// Same, for contents already in memory as a sequence of chunks (written in
/// order, without concatenating them first).
///
///   std::span<const std::byte> parts[] = {header, data};
///   write_file_atomically("model.safetensors", parts);
void write_file_atomically(const std::filesystem::path& target,
                           std::span<const std::span<const std::byte>> chunks);

/// Removes the temp files that killed or crashed saves left in `dir`
/// (write_file_atomically's `.NAME.tmp.PID.N`), so they do not pile up: one is
/// stale when its writing process is gone and it is older than `min_age` (a
/// live writer's file is never touched), or when it is older than a day (a
/// writer on another machine sharing the folder). `target_name` limits the
/// sweep to the temp files of that one target. Never throws; returns how many
/// it removed. write_file_atomically sweeps its target's temp files, the
/// kernel cache its folder once per process.
///
///   size_t n = sweep_stale_temp_files("checkpoints");
size_t sweep_stale_temp_files(const std::filesystem::path& dir, std::string_view target_name = {},
                              std::chrono::seconds min_age = std::chrono::seconds(10));

}  // namespace tessel
