package io.dataflow.local;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for local folders and shared mounts ({@code file:}) with many processes:
 * each new log file (N.json) is written whole to a temporary file beside it and then made
 * N.json with a hard link. link(2) fails with EEXIST when N.json exists, in one atomic step of
 * the file system, whichever process or machine made it; that failure becomes
 * {@link FileAlreadyExistsException}, Delta's signal that the version is taken, upon which it
 * checks for conflicts and retries at N+1.
 *
 * <p>Why: Delta's default for {@code file:} (HDFSLogStore, through FileContext's rename) and
 * its LocalLogStore check that N.json is absent and then rename onto it; on a local file
 * system the rename replaces an existing file, and the check's lock lives in one JVM. Two
 * processes committing one version at once both pass the check, the second rename replaces
 * the first commit, and both report success.
 *
 * <p>On NFS a retried link(2) whose first attempt succeeded answers EEXIST: a link count of 2
 * on the temporary file tells that the link is ours. A file system without hard links fails
 * the commit in one line rather than write unsafely. Overwrites (_last_checkpoint) replace the
 * file with an atomic rename: last writer wins, as on any store. Reads and listings are
 * Hadoop's.
 *
 * <p>Durable: the temporary file is synced (fsync) before it is linked and the folder after,
 * so that a power loss cannot leave an N.json that is empty or absent after Delta was told
 * the commit is made. Temporary files of commits killed before their cleanup (a process
 * killed between write and link) are removed by the next commit to the same log, once older
 * than {@link #STALE_TEMP_MILLIS}: no live commit holds one that long.
 */
public class HardLinkLogStore extends HadoopFileSystemLogStore {

  /** Age past which a commit's temporary file is a killed commit's (a live one lasts milliseconds). */
  public static final long STALE_TEMP_MILLIS = 15 * 60 * 1000L;
  private static final String TEMP_GLOB = ".{*.json,_last_checkpoint}.*.tmp";  // this class's own temporary files

  public HardLinkLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    java.nio.file.Path target = localPath(path, hadoopConf);
    java.nio.file.Path folder = target.getParent();
    if (folder == null || !Files.isDirectory(folder)) {
      throw new FileNotFoundException("No such file or directory: " + path.getParent());
    }
    java.nio.file.Path temp = folder.resolve("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try {
      writeSynced(temp, actions);
      // a checksum Hadoop's local file system left for an earlier file of this name would
      // no longer match: gone before the new content appears
      Files.deleteIfExists(folder.resolve("." + target.getFileName() + ".crc"));
      if (overwrite) {
        Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
      } else {
        link(target, temp, path);
      }
      syncFolder(folder);
    } finally {
      Files.deleteIfExists(temp);
    }
    removeStaleTemps(folder, System.currentTimeMillis() - STALE_TEMP_MILLIS);
  }

  /** The lines, written whole to a new file and synced to the disk before it may be linked. */
  private static void writeSynced(java.nio.file.Path temp, Iterator<String> actions) throws IOException {
    ByteArrayOutputStream content = new ByteArrayOutputStream();
    while (actions.hasNext()) {
      content.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
    try (FileChannel out = FileChannel.open(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
      ByteBuffer buffer = ByteBuffer.wrap(content.toByteArray());
      while (buffer.hasRemaining()) {
        out.write(buffer);
      }
      out.force(true);
    }
  }

  /** The folder's entries (the new N.json) synced, so the link survives a power loss too. */
  private static void syncFolder(java.nio.file.Path folder) throws IOException {
    try (FileChannel dir = FileChannel.open(folder, StandardOpenOption.READ)) {
      dir.force(true);
    } catch (UnsupportedOperationException e) {
      // a platform that cannot open a folder (not Linux or macOS): the file itself is synced
    }
  }

  /** Temporary files of killed commits in this log folder, older than {@code before}: removed. */
  public static int removeStaleTemps(java.nio.file.Path folder, long before) {
    int removed = 0;
    try (DirectoryStream<java.nio.file.Path> temps = Files.newDirectoryStream(folder, TEMP_GLOB)) {
      for (java.nio.file.Path temp : temps) {
        try {
          if (Files.getLastModifiedTime(temp).compareTo(FileTime.fromMillis(before)) < 0 && Files.deleteIfExists(temp)) {
            removed++;
          }
        } catch (IOException e) {
          // gone meanwhile, or not ours to remove: the next commit tries again
        }
      }
    } catch (IOException e) {
      // the commit is made; cleaning waits for the next
    }
    return removed;
  }

  private static void link(java.nio.file.Path target, java.nio.file.Path temp, Path path) throws IOException {
    try {
      Files.createLink(target, temp);
    } catch (FileAlreadyExistsException e) {
      if (linkCount(temp) == 2) {
        return;  // NFS: our link was made, and its retried request found it
      }
      FileAlreadyExistsException taken = new FileAlreadyExistsException(path.toString());
      taken.initCause(e);
      throw taken;
    } catch (UnsupportedOperationException e) {
      throw noLinks(path, e);
    } catch (java.nio.file.FileSystemException e) {
      String reason = String.valueOf(e.getReason()).toLowerCase(java.util.Locale.ROOT);
      if (reason.contains("not permitted") || reason.contains("not supported")) {
        throw noLinks(path, e);  // EPERM/ENOTSUP: a file system without hard links (FAT, some SMB mounts)
      }
      throw e;
    }
  }

  private static IOException noLinks(Path path, Exception cause) {
    return new IOException("cannot commit " + path + ": its file system refuses hard links ("
        + cause.getMessage() + "), which exclusive commits across processes need", cause);
  }

  private static int linkCount(java.nio.file.Path file) {
    try {
      return ((Number) Files.getAttribute(file, "unix:nlink")).intValue();
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return 1;
    }
  }

  private static java.nio.file.Path localPath(Path path, Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path qualified = fs.makeQualified(path);
    if (!"file".equals(qualified.toUri().getScheme())) {
      throw new IOException(HardLinkLogStore.class.getSimpleName() + " commits to local paths only, not " + qualified);
    }
    return Paths.get(qualified.toUri());
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;  // N.json appears whole: a link or a rename of a closed file
  }
}
